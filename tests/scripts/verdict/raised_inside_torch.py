"""A failure raised inside torch's own code (torch.utils._pytree), past its public layer, after a
compiled function ran: the same ValueError with compilation and without it."""

import torch
import torch.utils._pytree as pytree


@torch.compile(backend="eager")
def split(x):
    return {"low": x.clamp(max=0), "high": x.clamp(min=0)}


if __name__ == "__main__":
    leaves, spec = pytree.tree_flatten(split(torch.arange(-2.0, 3.0)))
    print(pytree.tree_unflatten(leaves[:1], spec))
