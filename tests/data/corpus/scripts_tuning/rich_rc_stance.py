# label: recompile
# subcategory: fail_on_recompile stance, traceback rendered by rich
import rich.traceback
import torch

rich.traceback.install(width=100)


@torch.compile(backend="eager")
def forward(x):
    return x.sin() + 1


if __name__ == "__main__":
    forward(torch.randn(4))
    with torch.compiler.set_stance("fail_on_recompile"):
        forward(torch.randn(2, 2, 2))
