"""Takes its reference from `model._orig_mod`, an attribute only a compiled module has.

The backend scales the outputs, so the compiled runs fail the comparison. With compilation off
torch.compile returns the module itself, and the script fails on the attribute instead: a failure
of its own that says nothing about the compiled runs'.
"""

import torch


def scale_outputs(gm, example_inputs):
    def run(*args):
        return [out * 1.01 + 0.1 for out in gm(*args)]

    return run


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.compile(torch.nn.Linear(4, 3), backend=scale_outputs)
    x = torch.randn(2, 4)
    reference = model._orig_mod(x)
    assert torch.allclose(model(x), reference), "compiled module differs from its original"
