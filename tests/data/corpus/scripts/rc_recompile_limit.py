# label: recompile
# subcategory: recompile_limit=1 with fail_on_recompile_limit_hit -> FailOnRecompileLimitHit
# runs: 2
import torch
import torch._dynamo.config

torch._dynamo.config.recompile_limit = 1
torch._dynamo.config.fail_on_recompile_limit_hit = True


@torch.compile(backend="eager", dynamic=False)
def forward(x):
    return x * 2 + 1


if __name__ == "__main__":
    for dtype in (torch.float32, torch.float64, torch.int64):
        forward(torch.ones(4, dtype=dtype))
