# label: runtime_crash
# also: triton
# subcategory: an assert inside an Inductor-generated Triton kernel fires at run time (injected testing bug)
import torch
import torch._inductor.config as inductor_config

inductor_config.triton.inject_relu_bug_TESTING_ONLY = "runtime_error"


def forward(x):
    return torch.relu(x) * 2


if __name__ == "__main__":
    torch.compile(forward)(torch.randn(256, device="cuda"))
    torch.cuda.synchronize()
