# label: backend_compiler_failed
# subcategory: a backend that fails to compile relu (PyTorch's testing backend), rich traceback with locals
import rich.traceback
import torch

rich.traceback.install(width=100, show_locals=True)


def forward(x):
    return torch.relu(x) * 2


if __name__ == "__main__":
    torch.compile(forward, backend="relu_compile_error_TESTING_ONLY")(torch.randn(8))
