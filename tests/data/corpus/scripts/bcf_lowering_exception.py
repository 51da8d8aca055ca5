# label: backend_compiler_failed
# subcategory: an Inductor lowering raises -> InductorError wrapping LoweringException
import torch
from torch._inductor import lowering


def broken_lowering(*args, **kwargs):
    raise NotImplementedError("this lowering is broken on purpose")


if __name__ == "__main__":
    # Replace the registered lowering of aten.sigmoid with one that raises.
    lowering.lowerings[torch.ops.aten.sigmoid.default] = broken_lowering

    @torch.compile(backend="inductor")
    def forward(x):
        return torch.sigmoid(x) * 3

    forward(torch.randn(8))
