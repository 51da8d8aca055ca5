# label: runtime_crash
# subcategory: out-of-bounds gather in Inductor-generated GPU code -> device-side assert
import torch


def forward(x, idx):
    return x[idx] * 2


if __name__ == "__main__":
    compiled = torch.compile(forward)
    x = torch.randn(64, device="cuda")
    compiled(x, torch.tensor([1, 2], device="cuda"))
    compiled(x, torch.tensor([1, 2000], device="cuda"))
    torch.cuda.synchronize()
