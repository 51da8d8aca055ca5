# label: triton
# also: runtime_crash
# subcategory: the same device-side assert with CUDA_LAUNCH_BLOCKING=1 (raised at the kernel launch)
# env: CUDA_LAUNCH_BLOCKING=1
import torch


def forward(table, idx):
    return torch.nn.functional.embedding(idx, table) * 2


if __name__ == "__main__":
    table = torch.randn(100, 16, device="cuda")
    compiled = torch.compile(forward)
    compiled(table, torch.tensor([1, 5, 7], device="cuda"))
    compiled(table, torch.tensor([1, 500, 7], device="cuda"))
    torch.cuda.synchronize()
