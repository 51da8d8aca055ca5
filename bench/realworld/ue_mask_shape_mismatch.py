# Source: https://github.com/pytorch/pytorch/issues/124901
# Label: user_error
# Failure: an attention block is called with an additive mask built for a longer sequence than the
#   input; the shapes cannot broadcast. Reported against torch.compile + autocast, but maintainers found the
#   same script fails with compilation turned off.
# Why this label: it fails the same way with TORCHDYNAMO_DISABLE=1: a bug in the caller, not the compiler.
import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)

    def forward(self, h, mask):
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


block = torch.compile(Attention(16), backend="aot_eager")
h = torch.randn(2, 32, 16)
mask = torch.zeros(2, 64, 64)  # built for 64 positions, the input has 32
print(block(h, mask).shape)
