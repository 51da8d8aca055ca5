# label: accuracy
# subcategory: TORCHDYNAMO_REPRO_LEVEL=4 accuracy minifier check after AOT -> AccuracyError
# env: TORCHDYNAMO_REPRO_LEVEL=4 TORCHDYNAMO_REPRO_AFTER=aot
import torch
import torch._inductor.config as inductor_config

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "accuracy"


def forward(x):
    return torch.relu(x) * 3


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.compile(forward, backend="inductor")(torch.randn(64))
