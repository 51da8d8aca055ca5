# Source: https://github.com/pytorch/pytorch/issues/167927
# Label: graph_break
# Failure: calling a torch.compiler.disable()'d helper from a fullgraph=True region raises Unsupported
#   ("Skip calling torch.compiler.disable()d function") instead of leaving the helper in eager.
# Why this label: the disabled call is a graph break that fullgraph=True turns into an error.
import torch


@torch.compiler.disable
def log_stats(t):
    return t.abs().max()


def step(x):
    y = x.relu() * 2
    peak = log_stats(y)
    return y / peak


print(torch.compile(step, backend="eager", fullgraph=True)(torch.randn(6)))
