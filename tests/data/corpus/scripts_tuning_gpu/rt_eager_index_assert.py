# label: runtime_crash
# subcategory: an out-of-range index in an eager ATen CUDA kernel (no compilation): the assert names IndexKernel.cu
import torch


def forward(table, idx):
    return table[idx] + 1


if __name__ == "__main__":
    table = torch.randn(64, 8, device="cuda")
    out = forward(table, torch.tensor([3, 4000], device="cuda"))
    print(out.sum().item())
