"""A graph-break repro padded with what a real one carries: unused imports and modules, dead
helpers, logging, large shapes. Only the data-dependent branch under fullgraph=True matters."""

import json
import math
import os

import torch
import torch.nn as nn

HIDDEN = 512
CONFIG = {"layers": 4, "dropout": 0.1, "name": "padded"}


class UnusedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(HIDDEN, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)

    def forward(self, x):
        return self.norm(self.lin(x)).relu()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(256, 256)
        self.scale = 2.0

    def forward(self, x):
        y = self.proj(x) * self.scale
        if y.sum() > 0:  # data-dependent branch: a graph break, fatal under fullgraph=True
            return y.sin()
        return y.cos()


def helper_never_called(a, b):
    return math.sqrt(a * a + b * b)


def describe(model):
    return json.dumps({"params": sum(p.numel() for p in model.parameters()), **CONFIG})


def make_inputs(batch, features):
    torch.manual_seed(0)
    return torch.randn(batch, features)


if __name__ == "__main__":
    os.environ.setdefault("PADDED_REPRO", "1")
    model = Model()
    unused = UnusedBlock()
    print(describe(model))
    data = make_inputs(64, 256)
    print("input", tuple(data.shape))
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    out = compiled(data)
    print("output", tuple(out.shape))
