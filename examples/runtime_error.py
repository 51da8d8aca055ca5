"""Compiled Inductor kernel fails while *running* (compilation succeeds).

Category: runtime_crash (error raised from compiled code).

Uses PyTorch's testing hook ``torch._inductor.config.cpp.
inject_relu_bug_TESTING_ONLY = "runtime_error"``: Inductor's C++ code
generator emits ``throw 1`` inside the relu computation.  The kernel compiles
fine; the C++ exception is thrown when the compiled function is called.

Expected: exits non-zero; see README.md for the exact exception text.
"""

import torch
import torch._inductor.config as inductor_config

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "runtime_error"
inductor_config.compile_threads = 1  # no worker pool: faster on small machines
inductor_config.fx_graph_cache = False  # always generate and build the kernel


@torch.compile(backend="inductor")
def f(x):
    return torch.relu(x) + 1


if __name__ == "__main__":
    f(torch.randn(8))
