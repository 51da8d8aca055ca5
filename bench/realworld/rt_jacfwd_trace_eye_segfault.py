# Source: https://github.com/pytorch/pytorch/issues/190856
# Label: runtime_crash
# Failure: the Inductor-compiled second forward-mode derivative (jacfwd of jacfwd) of a function using
#   trace(t) * eye(n) segfaults on its first call; eager computes it.
# Why this label: the compiled artifact crashes at run time (SIGSEGV), not during compilation.
import torch
from torch.func import jacfwd

torch.set_default_dtype(torch.float64)


def energy(m):
    shifted = m + torch.trace(m) * torch.eye(3, dtype=m.dtype)
    return (1.0 / shifted).mean()


m = torch.linspace(0.1, 0.9, 9).reshape(3, 3)
hessian = jacfwd(jacfwd(energy))
print("eager:", hessian(m).shape)
print("compiled:", torch.compile(hessian)(m).shape)
