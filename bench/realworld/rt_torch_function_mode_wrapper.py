# Source: https://github.com/pytorch/pytorch/issues/115741
# Label: runtime_crash
# Failure: calling an aot_eager-compiled function inside a TorchFunctionMode that doubles every result:
#   compilation succeeds, but AOTAutograd's runtime wrapper calls a torch function through the mode that
#   returns None, so the mode's "out * 2" raises TypeError when the compiled function runs. Eager works.
# Why this label: the compiled artifact fails at run time (in its runtime wrapper), not while compiling.
import torch


class DoubleEverything(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 2


@torch.compile(backend="aot_eager")
def flatten(x):
    return x.view(-1)


with DoubleEverything():
    result = flatten(torch.ones(2, 3))
print(result.sum().item())
