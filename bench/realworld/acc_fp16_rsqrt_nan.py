# Source: https://github.com/pytorch/pytorch/issues/183605
# Label: accuracy
# Failure: normalising a tiny float16 input by rsqrt(var + 1e-9): in float16 the epsilon underflows and eager
#   returns NaN everywhere, while Inductor computes in float32 and returns zeros.
# Why this label: compiled output silently differs from eager (NaN vs 0); assert_close with equal_nan fails.
import torch


def normalise(x):
    var = x.var(dim=-1, keepdim=True)
    return x * torch.rsqrt(var + 1e-9)


x = torch.full((3, 5), 1e-10, dtype=torch.float16)
ref = normalise(x)
out = torch.compile(normalise, backend="inductor")(x)
print("eager:", ref[0, 0].item(), "compiled:", out[0, 0].item())
torch.testing.assert_close(out, ref, equal_nan=True)
