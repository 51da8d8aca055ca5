# label: dynamic_shapes
# subcategory: a mark_dynamic dimension specialised by the code (ConstraintViolationError), rich traceback
import rich.traceback
import torch

rich.traceback.install(width=100)


@torch.compile(backend="eager")
def forward(x):
    return x.reshape(2, 4) * 2


if __name__ == "__main__":
    x = torch.randn(8)
    torch._dynamo.mark_dynamic(x, 0)
    forward(x)
