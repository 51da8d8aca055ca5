# label: runtime_crash
# subcategory: compiled C++ kernel throws at run time (relu bug injected in Inductor's C++ codegen)
import torch
import torch._inductor.config as inductor_config

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "runtime_error"


def forward(x):
    return torch.relu(x * 2) + 1


if __name__ == "__main__":
    compiled = torch.compile(forward, backend="inductor")
    compiled(torch.randn(32))
