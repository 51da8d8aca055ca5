"""Category runtime_crash: a Triton kernel fails an assertion on the GPU, asynchronously.

The testing hook turns relu into a device-side assert. The error is raised later, at the first
synchronisation (`.item()` far below), not at the kernel: CUDA_LAUNCH_BLOCKING=1 pins it to the
kernel launch in the generated code. Needs CUDA.
"""

import torch
import torch._inductor.config as inductor_config

inductor_config.triton.inject_relu_bug_TESTING_ONLY = "runtime_error"
inductor_config.fx_graph_cache = False


def f(x):
    return torch.relu(x) * 2.0


x = torch.randn(1024, device="cuda") + 3.0  # positive inputs: the injected assert (x == 0) fails
out = torch.compile(f)(x)
later = torch.cumsum(out, 0) ** 2 + out.flip(0)  # more asynchronous work queued after the bad kernel
print("total", later.sum().item())
