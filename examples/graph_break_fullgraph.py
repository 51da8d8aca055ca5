"""Graph break under fullgraph=True -> torch._dynamo.exc.Unsupported.

Category: graph_break (hard failure).

``fullgraph=True`` tells Dynamo that the whole function must become a single
FX graph.  The function branches on a tensor *value* (``x.sum() > 0``), which
Dynamo cannot trace without running the tensor code, so it would have to
insert a graph break; with fullgraph=True it raises instead.

Expected: exits non-zero with ``torch._dynamo.exc.Unsupported`` whose message
contains "Data-dependent branching", "Explanation:", "Hint:" and
"Developer debug context:".  Backend "eager" so no compiler is involved.
"""

import torch


@torch.compile(backend="eager", fullgraph=True)
def f(x):
    y = torch.sin(x)
    if y.sum() > 0:  # data-dependent control flow: graph break
        return y * 2
    return y - 1


if __name__ == "__main__":
    f(torch.ones(4))
