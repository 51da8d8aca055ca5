# label: accuracy
# subcategory: compiled result differs from eager (relu accuracy bug injected in Inductor's C++ codegen)
import torch
import torch._inductor.config as inductor_config

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "accuracy"


def forward(x):
    return torch.relu(x) * 3


if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.randn(64)
    expected = forward(x)
    actual = torch.compile(forward, backend="inductor")(x)
    torch.testing.assert_close(actual, expected)
