# label: triton
# subcategory: a Triton kernel fails to compile (no torch.compile involved) -> CompilationError
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * undefined_scale, mask=mask)


if __name__ == "__main__":
    x = torch.randn(1024, device="cuda")
    out = torch.empty_like(x)
    scale_kernel[(8,)](x, out, x.numel(), BLOCK=128)
    torch.cuda.synchronize()
