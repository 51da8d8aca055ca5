"""Inductor generates C++ that does not compile -> BackendCompilerFailed.

Category: backend_compiler_failed.

Uses PyTorch's own testing hook ``torch._inductor.config.cpp.
inject_relu_bug_TESTING_ONLY = "compile_error"``: Inductor's C++ code
generator emits the literal text ``compile error!`` in place of ``relu`` so
the generated kernel fails to build with the system C++ compiler.  This is
the same hook PyTorch's minifier tests use to simulate an Inductor codegen bug.

Expected: exits non-zero with
``torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:
CppCompileError: C++ compile error`` (the C++ compiler's output follows).
"""

import torch
import torch._inductor.config as inductor_config

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "compile_error"
inductor_config.compile_threads = 1  # no worker pool: faster on small machines
inductor_config.fx_graph_cache = False  # always generate and build the kernel


@torch.compile(backend="inductor")
def f(x):
    return torch.relu(x) + 1


if __name__ == "__main__":
    f(torch.randn(8))
