# label: graph_break
# subcategory: fullgraph=True with data-dependent branching on a tensor value
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:
            return torch.relu(y)
        return y.neg()


if __name__ == "__main__":
    model = torch.compile(Model(), backend="eager", fullgraph=True)
    model(torch.randn(2, 4))
