"""An accuracy repro whose assertion message is constant: `ok = False` then `assert ok, ...` fails
the same way without anything compiled, so a reducer can reach that degenerate candidate."""

import torch


def f(x):
    return torch.relu(x) * 2


if __name__ == "__main__":
    ok = False
    x = torch.linspace(-2, 2, 8)
    expected = f(x)
    # this debug backend swaps relu for add(1): a wrong result, no exception
    compiled = torch.compile(f, backend="relu_accuracy_error_TESTING_ONLY")
    actual = compiled(x)
    ok = torch.allclose(actual, expected)
    assert ok, "compiled and eager outputs differ"
