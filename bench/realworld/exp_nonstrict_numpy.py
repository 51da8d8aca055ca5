# Source: https://github.com/pytorch/pytorch/issues/148779
# Label: export
# Failure: non-strict torch.export of a forward that calls Tensor.numpy() fails with
#   "RuntimeError: .numpy() is not supported for tensor subclasses" (export traces with functional/fake
#   tensor subclasses; Dynamo rewrites .numpy() but non-strict export does not).
# Why this label: only torch.export fails; calling the module directly works.
import torch


class NumpyOffset(torch.nn.Module):
    def forward(self, x):
        total = x.numpy().sum()
        return x + total


model = NumpyOffset()
sample = torch.randn(4, 4)
print("eager:", model(sample).shape)
program = torch.export.export(model, (sample,), strict=False)
print(program)
