"""Category triton: Inductor generates a Triton kernel that does not compile.

PyTorch's testing hook makes Inductor's Triton relu lowering emit invalid code, so compiling the
fused kernel fails inside Triton; torch.compile reports it as an InductorError. Needs CUDA.
"""

import torch
import torch._inductor.config as inductor_config

inductor_config.triton.inject_relu_bug_TESTING_ONLY = "compile_error"
inductor_config.fx_graph_cache = False


def f(x, y):
    return torch.relu(x @ y + 1.0).sin()


x = torch.randn(64, 64, device="cuda")
y = torch.randn(64, 64, device="cuda")
print(torch.compile(f)(x, y).sum().item())
