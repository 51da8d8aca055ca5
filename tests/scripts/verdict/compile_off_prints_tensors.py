"""Prints the eager and the compiled result (multi-line tensors), then asserts they agree.

The backend shifts every output a little, so the compiled runs fail the assert; with compilation off
both lines print the same tensor and the script exits 0, which is a pass whatever it printed.
"""

import torch


def nudge(gm, example_inputs):
    def run(*args):
        return [out + 1e-2 for out in gm(*args)]

    return run


def gate(x):
    return torch.sigmoid(x) * x


if __name__ == "__main__":
    x = torch.linspace(-3, 3, 24).reshape(4, 6)
    eager = gate(x)
    compiled = torch.compile(gate, backend=nudge)(x)
    print("eager:", eager)
    print("compiled:", compiled)
    assert torch.allclose(eager, compiled), "compiled output differs from eager"
