# Source: https://github.com/pytorch/pytorch/issues/161562
# Label: graph_break
# Failure: a class statement inside a compiled function (LOAD_BUILD_CLASS) is not traceable, so
#   fullgraph=True raises Unsupported at the class definition.
# Why this label: Dynamo reports an unsupported construct that would otherwise be a graph break.
import torch


@torch.compile(backend="eager", fullgraph=True)
def shift(values):
    offset = values + 10

    class Holder:
        def __init__(self, v):
            self.v = v

    box = Holder(values)
    return box.v - offset


print(shift(torch.tensor([1.0, 2.0])))
