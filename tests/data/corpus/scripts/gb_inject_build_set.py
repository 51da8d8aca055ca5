# label: graph_break
# subcategory: BUILD_SET made unsupported by a testing flag, under fullgraph=True
import torch
import torch._dynamo.config

torch._dynamo.config.inject_BUILD_SET_unimplemented_TESTING_ONLY = True


@torch.compile(backend="eager", fullgraph=True)
def forward(x):
    keys = {1, 2, 3}
    return x * len(keys)


if __name__ == "__main__":
    forward(torch.randn(4))
