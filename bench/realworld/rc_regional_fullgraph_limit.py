# Source: https://github.com/pytorch/pytorch/issues/163329
# Label: recompile
# Failure: regional compilation of repeated blocks with fullgraph=True, where forward guards on something
#   that differs per block; the ninth block exceeds the recompile limit and, because the region is
#   fullgraph, Dynamo raises FailOnRecompileLimitHit instead of falling back to eager.
#   (In the issue the per-block guard was the identity of each block's attention processor object; that no
#   longer recompiles on 2.13, so here the per-block value is the layer name used as a registry key.)
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
