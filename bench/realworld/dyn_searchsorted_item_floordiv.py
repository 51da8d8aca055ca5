# Source: https://github.com/pytorch/pytorch/issues/150613
# Label: dynamic_shapes
# Failure: searchsorted with a scalar value computed as seq[-1].item() // 3 under capture_scalar_outputs:
#   the floor division of the unbacked symbol cannot be specialised and compilation fails with a
#   data-dependent error.
# Why this label: a data-dependent (unbacked SymInt) failure under plain torch.compile.
import torch

torch._dynamo.config.capture_scalar_outputs = True


def bucket(seq):
    return torch.searchsorted(seq, seq[-1].item() // 3)


seq = torch.tensor([0, 2, 5, 11, 20])
print("eager:", bucket(seq))
print("compiled:", torch.compile(bucket)(seq))
