# Source: https://github.com/pytorch/pytorch/issues/160508
# Label: dynamo_internal
# Failure: compiling a function that takes the forward-mode derivative (torch.func.jacfwd) of a small
#   model inside torch.vmap: eager works, but Dynamo's fake-tensor propagation hits an internal assert in
#   functorch's dual-number unpacking ("INTERNAL ASSERT FAILED ... please report a bug to PyTorch").
# Why this label: an internal assertion inside the compiler stack while tracing valid functorch code.
import torch
from torch.func import jacfwd


def displace(t, x):
    return torch.sin(t * x) * x + t * t


def time_derivative(t, x):
    return jacfwd(displace, argnums=0)(t, x)


batched = torch.vmap(time_derivative)
t = torch.rand(4)
x = torch.rand(4, 3)
print("eager:", batched(t, x).shape)
print("compiled:", torch.compile(batched)(t, x).shape)
