# label: recompile
# subcategory: recompile limit hit -> warning and fallback to eager; the script exits 0
# env: TORCH_LOGS=recompiles
import torch
import torch._dynamo.config

torch._dynamo.config.recompile_limit = 2


@torch.compile(backend="eager")
def forward(x, mode):
    return x * len(mode)


if __name__ == "__main__":
    for mode in ("a", "bb", "ccc", "dddd"):
        forward(torch.ones(4), mode)
    print("done")
