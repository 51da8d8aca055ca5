# label: graph_break
# subcategory: fullgraph graph break (data-dependent branch), traceback rendered by rich
import rich.traceback
import torch

rich.traceback.install(width=100)


@torch.compile(backend="eager", fullgraph=True)
def forward(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


if __name__ == "__main__":
    forward(torch.randn(8))
