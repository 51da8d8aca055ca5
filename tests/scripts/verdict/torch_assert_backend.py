"""A backend that rewrites the graph: before each cos it inserts torch._assert(False, ...).

The compiled graph raises the AssertionError as it runs, from its generated forward (<eval_with_key>)
through torch/__init__.py: code torch.compile produced, not a comparison in the script.
"""

import torch


def forbid_cos(gm, example_inputs):
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in (torch.cos, torch.ops.aten.cos.default):
            with gm.graph.inserting_before(node):
                gm.graph.call_function(torch._assert, (False, "cos is not allowed here"))
    gm.recompile()
    return gm.forward


def wave(x):
    return torch.cos(x) + 1


if __name__ == "__main__":
    x = torch.ones(3)
    out = torch.compile(wave, backend=forbid_cos)(x)
    print("max diff:", (out - wave(x)).abs().max().item())
