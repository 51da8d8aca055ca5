# label: export
# subcategory: torch.export with a dynamic dim that the model specializes -> constraint violation
import torch
from torch.export import Dim


class Model(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 4:
            return x * 2
        return x + 1


if __name__ == "__main__":
    batch = Dim("batch", min=2, max=64)
    torch.export.export(Model(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: batch}})
