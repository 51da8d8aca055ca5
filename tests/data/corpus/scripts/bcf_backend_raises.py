# label: backend_compiler_failed
# subcategory: a backend compiler raises while compiling the captured graph -> BackendCompilerFailed
# runs: 2
import torch


def forward(x):
    return torch.relu(x + 1).sum()


if __name__ == "__main__":
    compiled = torch.compile(forward, backend="relu_compile_error_TESTING_ONLY")
    compiled(torch.randn(16))
