# label: runtime_crash
# subcategory: out-of-bounds index in Inductor-compiled code raises at run time
import torch


def forward(x, idx):
    return x[idx] * 2


if __name__ == "__main__":
    compiled = torch.compile(forward, backend="inductor")
    compiled(torch.randn(8), torch.tensor([1, 2]))
    compiled(torch.randn(8), torch.tensor([1, 20]))
