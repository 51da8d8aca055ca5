# label: accuracy
# subcategory: compiled GPU result differs from eager (relu accuracy bug injected in Triton codegen)
import torch
import torch._inductor.config as inductor_config

inductor_config.triton.inject_relu_bug_TESTING_ONLY = "accuracy"


def forward(x):
    return torch.relu(x) * 2


if __name__ == "__main__":
    x = torch.randn(256, device="cuda")
    torch.testing.assert_close(torch.compile(forward)(x), forward(x))
