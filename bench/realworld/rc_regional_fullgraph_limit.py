# Source: https://github.com/pytorch/pytorch/issues/163329
# Label: recompile
# Failure: regional compilation of repeated blocks with fullgraph=True, where each block carries its own
#   per-layer value that forward guards on; the ninth block exceeds the recompile limit and, because the
#   region is fullgraph, Dynamo raises FailOnRecompileLimitHit instead of falling back.
# Why this label: the error is the recompile limit (FailOnRecompileLimitHit).
import torch

ATTN_BACKENDS = {}


class Layer(torch.nn.Module):
    def __init__(self, idx):
        super().__init__()
        self.layer_name = f"model.layers.{idx}.attn"
        ATTN_BACKENDS[self.layer_name] = 1.0 + idx / 10
        self.mlp = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.mlp(x) * ATTN_BACKENDS[self.layer_name]


layers = [Layer(i) for i in range(12)]
for layer in layers:
    layer.compile(backend="eager", fullgraph=True)
h = torch.randn(2, 8)
with torch.no_grad():
    for layer in layers:
        h = layer(h)
print(h.shape)
