# label: graph_break
# subcategory: fullgraph=True with a print() call -> torch._dynamo.exc.Unsupported
# runs: 2
import torch


@torch.compile(backend="eager", fullgraph=True)
def forward(x):
    y = torch.sin(x) + 1
    print("intermediate", y.shape)
    return y * 2


if __name__ == "__main__":
    forward(torch.randn(8))
