# A custom torch.compile backend that refuses graphs holding sin: the failure is raised in the script's own
# backend (BackendCompilerFailed wraps it), and compiling with a PyTorch backend would pass.
import torch


def strict_backend(gm, example_inputs):
    if any("sin" in str(node.target) for node in gm.graph.nodes):
        raise RuntimeError("strict_backend cannot lower sin")
    return gm.forward


torch.compile(lambda x: x.sin() + 1, backend=strict_backend)(torch.ones(3))
