# Source: https://github.com/pytorch/pytorch/issues/188224
# Label: backend_compiler_failed
# Failure: cummin over an out-of-range dim of a 0-d/empty tensor is accepted by eager, but Inductor's
#   lowering trips its dim validation (LoweringException: AssertionError).
# Why this label: only the Inductor backend fails; eager produces a tensor.
import torch


def running_min():
    w = torch.bartlett_window(0, periodic=False)
    return torch.cummin(w.clone(), -46)[0]


print("eager:", running_min())
print("compiled:", torch.compile(running_min, backend="inductor")())
