"""Too many recompilations -> FailOnRecompileLimitHit.

Category: recompile.

Each call passes a different Python ``int`` for ``scale``.  Dynamo guards on
the exact value of the int (it is burned into the graph as a constant), so
every new value fails the guard ``scale == <old value>`` and triggers a
recompile.  With dynamic-shape "automatic" mode Dynamo would normally mark the
int dynamic after the first recompile; ``automatic_dynamic_shapes = False``
keeps it static so the limit is reached.  ``recompile_limit = 2`` and
``fail_on_recompile_limit_hit = True`` turn "fall back to eager silently" into
a hard error.

Expected: exits non-zero with
``torch._dynamo.exc.FailOnRecompileLimitHit: Hard failure due to
fail_on_recompile_limit_hit`` on the third call (``scale=3``), chained from
``Unsupported: Dynamo recompile limit exceeded``.
Run with TORCH_LOGS=recompiles to see each recompile and the failed guard.
Backend "eager".
"""

import torch
import torch._dynamo.config as dynamo_config

dynamo_config.recompile_limit = 2
dynamo_config.fail_on_recompile_limit_hit = True
dynamo_config.automatic_dynamic_shapes = False


@torch.compile(backend="eager")
def f(x, scale):
    return x * scale


if __name__ == "__main__":
    x = torch.ones(3)
    for scale in range(1, 5):
        f(x, scale)
