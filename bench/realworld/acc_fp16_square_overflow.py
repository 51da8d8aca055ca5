# Source: https://github.com/pytorch/pytorch/issues/183607
# Label: accuracy
# Failure: squaring a value after casting it to float16 overflows to inf in eager, but Inductor keeps the
#   product in float32 and returns a finite number.
# Why this label: the compiled result silently differs from eager; a bare assert comparing them fails.
import torch


def square_half(x):
    h = x.to(torch.float16)
    return (h * h).float()


x = torch.tensor([3000.0, 5000.0, 7000.0])
expected = square_half(x)
got = torch.compile(square_half, backend="inductor")(x)
print("eager:", expected, "compiled:", got)
assert torch.equal(expected, got)
