# label: runtime_crash
# subcategory: the compiled graph raises when it runs (backend replaced relu with a failing assert)
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x).mean()


if __name__ == "__main__":
    compiled = torch.compile(Model(), backend="relu_runtime_error_TESTING_ONLY")
    compiled(torch.randn(10))
