# label: recompile
# subcategory: fail_on_recompile stance with TORCH_LOGS=recompiles (the guard failure is logged first)
# env: TORCH_LOGS=recompiles
import torch


@torch.compile(backend="eager")
def forward(x, scale):
    return x * scale


if __name__ == "__main__":
    forward(torch.randn(4), 2)
    with torch.compiler.set_stance("fail_on_recompile"):
        forward(torch.randn(4), 3)
