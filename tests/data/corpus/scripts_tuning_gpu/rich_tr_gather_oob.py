# label: triton
# also: runtime_crash
# subcategory: device-side assert from an Inductor-generated Triton kernel, traceback rendered by rich
import rich.traceback
import torch

rich.traceback.install(width=100)


def forward(table, idx):
    return table[idx] + 1


if __name__ == "__main__":
    table = torch.randn(64, 8, device="cuda")
    compiled = torch.compile(forward)
    compiled(table, torch.tensor([3, 4], device="cuda"))
    out = compiled(table, torch.tensor([3, 4000], device="cuda"))
    print(out.sum().item())
