# Source: https://github.com/pytorch/pytorch/issues/136002
# Label: dynamic_shapes
# Failure: a dimension marked dynamic is compared to a literal inside the compiled function, so Dynamo
#   specialises it to that value and plain torch.compile raises ConstraintViolationError.
# Why this label: the error is a dynamic-shape constraint violation (RelaxedUnspecConstraint ... inferred to
#   be a constant) under torch.compile, not torch.export; without compilation the script runs fine.
import torch


def scale_rows(batch):
    if batch.shape[0] == 8:
        return batch * 3
    return batch - 1


tokens = torch.ones(8, 4)
torch._dynamo.mark_dynamic(tokens, 0)
out = torch.compile(scale_rows, backend="eager")(tokens)
print(out.sum().item())
