# label: recompile
# subcategory: error_on_recompile=True -> RecompileError on the first guard failure
import torch
import torch._dynamo.config

torch._dynamo.config.error_on_recompile = True


@torch.compile(backend="eager")
def forward(x, scale):
    return x * scale


if __name__ == "__main__":
    forward(torch.ones(4), 2)
    forward(torch.ones(4), 3)
