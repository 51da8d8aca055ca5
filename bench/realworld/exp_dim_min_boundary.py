# Source: https://github.com/pytorch/pytorch/issues/176349
# Label: export
# Failure: exporting with a dynamic batch Dim whose min is 1 and an example input of batch size 1: the
#   example value sits on the min boundary and export fails instead of producing a dynamic program.
# Why this label: raised by torch.export's dynamic shape handling.
import torch


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(10, 3)

    def forward(self, x):
        return self.fc(x).softmax(-1)


batch = torch.export.Dim("batch", min=1, max=64)
program = torch.export.export(Head(), (torch.randn(1, 10),), dynamic_shapes={"x": {0: batch}})
print(program.range_constraints)
