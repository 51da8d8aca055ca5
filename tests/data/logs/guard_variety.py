"""Inputs of many kinds, for the guard trees of TORCH_LOGS=guards (see README.md)."""

import collections

import torch

SCALE = 2.0


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x, table, pair, n, ints, nested, queue):
        y = self.lin(x) + table["a"] + pair[0] * n
        for i in ints:
            y = y + i
        for row in nested:
            y = y + row[0]
        return y + queue[0] * SCALE


net = torch.compile(Net(), backend="eager")
x = torch.ones(3)
args = ({"a": torch.ones(3), "b": 1}, (torch.ones(3), 2), 3, [1, 2], [[torch.ones(3)], [torch.ones(3)]],
        collections.deque([torch.ones(3)]))
net(x, *args)
net(x, args[0], args[1], 4, *args[3:])  # another int: recompiles (n becomes dynamic)
net(x, *args[:3], [1, 2, 3], *args[4:])  # a longer list: recompiles on its length


@torch.compile(backend="eager")
def scaled(t):
    return t * SCALE


scaled(torch.ones(3))
scaled(torch.ones(2, 2))  # another rank: recompiles
