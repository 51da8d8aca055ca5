# Source: https://github.com/pytorch/pytorch/issues/197067
# Label: runtime_crash
# Failure: the gradient of torch.sgn is an efficient ZeroTensor (no storage); the Inductor CPU kernel that
#   indexes it reads through a null data pointer and the process dies with SIGSEGV. Eager returns 10.
# Why this label: compilation succeeds and the generated kernel crashes when it runs.
import torch

a = torch.randn(3, requires_grad=True)
(grad,) = torch.autograd.grad(torch.sgn(a).sum(), a)
print("zerotensor:", grad._is_zerotensor())


def last_plus(t):
    return t[-1] + 10


print("eager:", last_plus(grad))
print("compiled:", torch.compile(last_plus, backend="inductor")(grad))
