# label: recompile
# subcategory: torch.compiler.set_stance("fail_on_recompile") refuses a recompile (new input rank)
import torch


@torch.compile(backend="eager")
def forward(x):
    return x * 2


if __name__ == "__main__":
    forward(torch.randn(4))
    with torch.compiler.set_stance("fail_on_recompile"):
        forward(torch.randn(4, 3))
