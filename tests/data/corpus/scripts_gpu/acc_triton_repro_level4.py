# label: accuracy
# subcategory: accuracy minifier (TORCHDYNAMO_REPRO_LEVEL=4, after aot) on a GPU model with an injected Triton accuracy bug
# env: TORCHDYNAMO_REPRO_LEVEL=4 TORCHDYNAMO_REPRO_AFTER=aot
import torch
import torch._inductor.config as inductor_config

inductor_config.triton.inject_relu_bug_TESTING_ONLY = "accuracy"


def forward(x):
    return torch.relu(x) * 2


if __name__ == "__main__":
    torch.compile(forward)(torch.randn(256, device="cuda"))
