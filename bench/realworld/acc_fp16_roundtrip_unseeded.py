# Source: https://github.com/pytorch/pytorch/issues/185337
# Label: accuracy
# Failure: x.to(float16).to(float32) should round x to half precision; Inductor's CPU code skips the
#   intermediate rounding, so compiled values (and their row sums) stay closer to the float32 input than
#   eager's. Inputs are unseeded: the mismatch figures change from run to run.
# Why this label: silent numerical divergence from eager; assert_close fails.
import torch


def through_half(x):
    y = x.to(dtype=torch.float16).to(dtype=torch.float32)
    return y, y.sum(dim=1)


x = torch.rand(4, 5) * 3 + 0.1
eager_y, eager_sum = through_half(x)
comp_y, comp_sum = torch.compile(through_half, backend="inductor", dynamic=False)(x)
torch.testing.assert_close(comp_y, eager_y)
torch.testing.assert_close(comp_sum, eager_sum)
print("match")
