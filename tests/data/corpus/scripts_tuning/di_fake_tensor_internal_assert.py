# label: dynamo_internal
# subcategory: Dynamo's fake-tensor propagation of forward-mode AD under vmap hits an internal assert of
#   functorch's dual-number unpacking (TorchRuntimeError wrapping INTERNAL ASSERT FAILED); eager runs
import torch
from torch.func import jacfwd, vmap


def energy(scale, points):
    return (torch.cos(scale * points) * points).sum(-1) + scale


batched = vmap(jacfwd(energy, argnums=0))
scale = torch.rand(3)
points = torch.rand(3, 5)
print("eager:", batched(scale, points).shape)
print("compiled:", torch.compile(batched, backend="eager")(scale, points).shape)
