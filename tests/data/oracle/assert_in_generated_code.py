"""A backend whose graph asserts: the AssertionError is raised from the graph module's generated
forward, not by a comparison of the script's."""

import torch


def asserting_backend(gm, example_inputs):
    out = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(out):
        gm.graph.call_function(torch._assert, (False, "compiled and eager outputs differ"))
    gm.recompile()
    return gm.forward


def f(x):
    return torch.relu(x) * 2


if __name__ == "__main__":
    x = torch.linspace(-2, 2, 8)
    torch.compile(f, backend=asserting_backend)(x)
