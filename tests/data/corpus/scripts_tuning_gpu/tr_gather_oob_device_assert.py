# label: triton
# also: runtime_crash
# subcategory: an out-of-range index in an Inductor-generated Triton gather kernel fires its device-side assert
import torch


def forward(table, idx):
    return table[idx].sum(dim=-1)


if __name__ == "__main__":
    table = torch.randn(100, 16, device="cuda")
    compiled = torch.compile(forward)
    compiled(table, torch.tensor([1, 5, 7], device="cuda"))
    compiled(table, torch.tensor([1, 500, 7], device="cuda"))
    torch.cuda.synchronize()
