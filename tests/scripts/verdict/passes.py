"""Compiles and runs cleanly: no error, no graph break, no recompile."""

import torch


@torch.compile(backend="eager")
def f(x):
    return torch.cos(x) + 1


if __name__ == "__main__":
    for _ in range(3):
        f(torch.arange(4.0))
    print("done")
