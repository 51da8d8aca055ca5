# label: export
# subcategory: non-strict torch.export of data-dependent control flow -> GuardOnDataDependentSymNode
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x.sin()
        return x.cos()


if __name__ == "__main__":
    torch.export.export(Model(), (torch.randn(4),), strict=False)
