# label: triton
# subcategory: a Triton kernel asks for more shared memory than the GPU has -> OutOfResources
import torch
import triton
import triton.language as tl


@triton.jit
def big_dot_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(a, b))


if __name__ == "__main__":
    n = 512
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    c = torch.empty(n, n, device="cuda")
    big_dot_kernel[(1,)](a, b, c, BLOCK=n, num_stages=4)
    torch.cuda.synchronize()
