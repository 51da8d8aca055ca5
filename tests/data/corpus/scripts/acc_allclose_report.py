# label: accuracy
# subcategory: a script comparing eager and compiled outputs with torch.allclose and printing the report
import sys

import torch


def forward(x):
    return torch.relu(x) - 0.5


if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.randn(1000)
    eager = forward(x)
    compiled = torch.compile(forward, backend="relu_accuracy_error_TESTING_ONLY")(x)
    diff = (eager - compiled).abs()
    print(f"max abs diff: {diff.max().item():.6f}")
    print(f"torch.allclose(eager, compiled, atol=1e-5): {torch.allclose(eager, compiled, atol=1e-5)}")
    if not torch.allclose(eager, compiled, atol=1e-5):
        print("MISMATCH between eager and compiled outputs", file=sys.stderr)
        sys.exit(1)
