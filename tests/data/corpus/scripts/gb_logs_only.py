# label: graph_break
# subcategory: silent graph breaks reported by TORCH_LOGS=graph_breaks; the script exits 0
# env: TORCH_LOGS=graph_breaks
import torch


@torch.compile(backend="eager")
def forward(x):
    y = torch.cos(x) + 1
    print("y =", y.shape)
    if y.sum() > 0:
        y = y * 2
    return torch.relu(y)


if __name__ == "__main__":
    for _ in range(2):
        forward(torch.arange(4.0))
    print("done")
