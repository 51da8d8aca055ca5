# label: triton
# also: backend_compiler_failed
# subcategory: a user-defined Triton kernel called under torch.compile fails Triton compilation
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, 3)  # not a power of two: rejected by Triton
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


@torch.compile
def forward(x):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    return out * 2


if __name__ == "__main__":
    forward(torch.randn(1024, device="cuda"))
    torch.cuda.synchronize()
