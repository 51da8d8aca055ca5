# label: accuracy
# subcategory: compiled result differs from eager (PyTorch's relu accuracy testing backend), assert_close under rich
import rich.traceback
import torch

rich.traceback.install(width=100)


def forward(x):
    return torch.relu(x) * 2


if __name__ == "__main__":
    x = torch.randn(16)
    compiled = torch.compile(forward, backend="relu_accuracy_error_TESTING_ONLY")
    torch.testing.assert_close(compiled(x), forward(x))
