"""Compiled result silently differs from eager -> accuracy failure.

Category: accuracy.

Uses PyTorch's testing hook ``torch._inductor.config.cpp.
inject_relu_bug_TESTING_ONLY = "accuracy"``: Inductor's C++ code generator
emits ``x + 1`` instead of ``relu(x)``.  Compilation and execution succeed;
only comparing against eager reveals the wrong numbers.  The script does the
comparison itself with ``torch.testing.assert_close``.

Expected: exits non-zero with ``AssertionError: Tensor-likes are not close!``
and "Mismatched elements: 8 / 8 (100.0%)" (the compiled kernel computes
``(x + 1) * 2`` instead of ``relu(x) * 2``).
"""

import torch
import torch._inductor.config as inductor_config

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "accuracy"
inductor_config.compile_threads = 1  # no worker pool: faster on small machines
inductor_config.fx_graph_cache = False  # always generate and build the kernel


def f(x):
    return torch.relu(x) * 2


if __name__ == "__main__":
    x = torch.linspace(-2, 2, 8)
    expected = f(x)
    actual = torch.compile(f, backend="inductor")(x)
    torch.testing.assert_close(actual, expected)
