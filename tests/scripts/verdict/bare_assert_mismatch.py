"""A compiled result that differs from eager, checked with a bare assert (no traceback from torch).

The backend adds 1 to every output, as a miscompiling backend would; with compilation off the
assert holds. PT2BB_FIXED=1 stands for the fix: the backend then runs the graph as it is.
"""

import os

import torch


def off_by_one(gm, example_inputs):
    if os.environ.get("PT2BB_FIXED") == "1":
        return gm.forward

    def run(*args):
        return [out + 1 for out in gm(*args)]

    return run


def f(x):
    return torch.sin(x) * 2


if __name__ == "__main__":
    x = torch.linspace(-1, 1, 6)
    expected = f(x)
    actual = torch.compile(f, backend=off_by_one)(x)
    assert torch.allclose(actual, expected)
