# label: runtime_crash
# subcategory: a custom op whose fake (meta) implementation claims other strides than its real kernel
#   returns: Inductor's generated code checks the output with assert_size_stride and raises when the
#   compiled code runs; only the asserting line and the exception kept, as such asserts are pasted
# tail: 6
import torch


@torch.library.custom_op("pt2bb::transpose_copy", mutates_args=())
def transpose_copy(x: torch.Tensor) -> torch.Tensor:
    return x.t().contiguous()  # row-major result


@transpose_copy.register_fake
def _(x):
    return x.new_empty(x.shape[1], x.shape[0]).t().contiguous().t()  # claims column-major strides


@torch.compile(backend="inductor")
def f(x):
    return transpose_copy(x) + 1


print(f(torch.randn(4, 6)))
