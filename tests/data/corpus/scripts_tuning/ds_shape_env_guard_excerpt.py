# label: dynamic_shapes
# subcategory: a mark_dynamic dimension specialised by the code: the logged guard-creation error, cut inside
#   its traceback (before the ConstraintViolationError line), as such logs are often pasted
# head: 15
import torch


@torch.compile(backend="eager")
def forward(x):
    return x.reshape(2, 4) * 2


if __name__ == "__main__":
    x = torch.randn(8)
    torch._dynamo.mark_dynamic(x, 0)
    forward(x)
