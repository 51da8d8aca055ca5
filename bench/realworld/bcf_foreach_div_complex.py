# Source: https://github.com/pytorch/pytorch/issues/197376
# Label: backend_compiler_failed
# Failure: in-place foreach division of a list of complex tensors by a complex scalar runs in eager but
#   Inductor fails with InductorError: AssertionError: <built-in function getitem> is not an OpOverload.
# Why this label: the assertion fires inside Inductor while compiling the graph.
import torch


def scale_all(ts):
    torch._foreach_div_(ts, 2j)


eager = [torch.tensor([1 + 2j, 3 + 4j], dtype=torch.complex64)]
scale_all(eager)
print("eager:", eager)
compiled = [torch.tensor([1 + 2j, 3 + 4j], dtype=torch.complex64)]
torch.compile(scale_all, backend="inductor")(compiled)
print("compiled:", compiled)
