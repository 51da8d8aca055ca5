# Source: https://github.com/pytorch/pytorch/issues/171593
# Label: recompile
# Failure: many instances of one module class, each compiled on its own, each with a different string
#   attribute read in forward: the guard self.key == '...' fails for every new instance, all entries count
#   against the recompile limit of the shared forward code, and Dynamo gives up after 8 (warning, exit 0).
# Why this label: a silent recompile-limit case; maintainers keep the explicit recompile as intended.
import torch


class Tagged(torch.nn.Module):
    def __init__(self, key):
        super().__init__()
        self.key = key
        self.proj = torch.nn.Linear(6, 6)

    def forward(self, x):
        y = self.proj(x)
        if self.key.startswith("decoder"):
            y = torch.relu(y)
        return y


layers = [torch.compile(Tagged(f"decoder.layers.{i}"), backend="eager") for i in range(12)]
h = torch.randn(3, 6)
for layer in layers:
    h = layer(h)
print(h.shape)
