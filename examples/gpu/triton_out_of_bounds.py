"""A runtime_crash in the text, user_error by the verdict: a user-written Triton kernel stores far out of bounds.

The kernel forgets its mask and strides by a wrong factor, so it writes gigabytes past the end of
the buffer: an illegal memory access. Called from a torch.compile'd function, it faults with
compilation off too: the program's bug, not the compiler's. Needs CUDA and Triton.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr + offsets * (1 << 28), values * 2.0)  # bug: wrong stride, no mask


def scale(x):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


@torch.compile
def f(x):
    return scale(x) + 1.0


print(f(torch.randn(4096, device="cuda")).sum().item())
