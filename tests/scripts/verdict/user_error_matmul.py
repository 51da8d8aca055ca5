"""A shape error in the program itself: it fails under torch.compile and without it."""

import torch


@torch.compile(backend="eager")
def project(x, weight):
    return torch.relu(x @ weight)


if __name__ == "__main__":
    project(torch.ones(2, 3), torch.ones(4, 5))
