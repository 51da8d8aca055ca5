"""A custom backend whose compiled callable raises when it runs (compiling succeeds).

The failure is raised in the script's own function `run`, which only the compiled code calls: a bug of
that backend, as when a backend raises while compiling.
"""

import torch


def picky_backend(gm, example_inputs):
    def run(*args):
        if any(a.dtype == torch.float32 for a in args):
            raise RuntimeError("picky_backend: float32 inputs are not supported at run time")
        return gm(*args)

    return run


def wave(x):
    return torch.cos(x) * 3


if __name__ == "__main__":
    print(torch.compile(wave, backend=picky_backend)(torch.ones(4)))
