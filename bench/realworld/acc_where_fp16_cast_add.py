# Source: https://github.com/pytorch/pytorch/issues/183761
# Label: accuracy
# Failure: where(mask, full_like(.5), full_like(-.5)) cast to float16 and added to another float16 cast:
#   Inductor elides the fp16 round trips across the fused pointwise ops, so sums differ from eager.
# Why this label: silent numerical mismatch between compiled and eager (maintainers: expected unless
#   TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1); the script's assert_close fails.
import torch


def blend(x, mask):
    base = torch.where(mask, torch.full_like(x, 0.5), torch.full_like(x, -0.5))
    return base.to(torch.float16) + x.to(torch.float16)


x = torch.linspace(0, 9, 64)
mask = torch.arange(64) % 4 == 0
ref = blend(x, mask)
out = torch.compile(blend, backend="inductor")(x, mask)
torch.testing.assert_close(out, ref, rtol=0, atol=0)
print("match")
