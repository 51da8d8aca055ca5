"""Category accuracy: the compiled Triton kernel computes a wrong relu. Needs CUDA."""

import torch
import torch._inductor.config as inductor_config

inductor_config.triton.inject_relu_bug_TESTING_ONLY = "accuracy"
inductor_config.fx_graph_cache = False


def f(x):
    return torch.relu(x) + 1.0


x = torch.randn(256, device="cuda")
torch.testing.assert_close(torch.compile(f)(x), f(x))
