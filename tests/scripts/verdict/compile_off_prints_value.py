"""A print inside a function compiled with fullgraph=True: the compiled runs fail on the graph break.

With compilation off the script runs through and prints a difference of 0.0, then exits 0.
"""

import torch


def total(x):
    print("visiting", tuple(x.shape))
    return torch.relu(x).sum()


if __name__ == "__main__":
    x = torch.arange(-4.0, 4.0)
    out = torch.compile(total, backend="eager", fullgraph=True)(x)
    print("max diff:", (out - total(x)).abs().item())
