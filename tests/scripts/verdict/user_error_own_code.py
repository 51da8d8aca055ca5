"""The program's own lookup fails: the same KeyError, from the same line of the script, with
compilation and without it."""

import torch

SCALES = {"small": 0.5, "large": 2.0}


def scale_for(name):
    return SCALES[name]


@torch.compile(backend="eager")
def scaled(x, name):
    return x * scale_for(name)


if __name__ == "__main__":
    print(scaled(torch.ones(3), "medium"))
