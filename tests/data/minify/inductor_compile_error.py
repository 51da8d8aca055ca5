"""An Inductor code generation bug (PyTorch's relu injection hook) inside a larger graph."""

import torch
import torch._inductor.config as inductor_config

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "compile_error"
inductor_config.compile_threads = 1


def f(x, y):
    a = torch.sin(x) + y
    b = torch.cos(a) * 2
    c = torch.relu(b) + a
    d = torch.tanh(c) - y
    return d.exp() + b


if __name__ == "__main__":
    torch.compile(f, backend="inductor")(torch.randn(8), torch.randn(8))
