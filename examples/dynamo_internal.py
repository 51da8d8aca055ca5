"""An internal error inside Dynamo -> torch._dynamo.exc.InternalTorchDynamoError.

Category: dynamo_internal.

A traceable tensor subclass (``TwoTensor``, from PyTorch's own test helpers)
may define ``__metadata_guard__`` to customise Dynamo's guard on its metadata;
it must be a classmethod.  Here it is (wrongly) a staticmethod.  Dynamo's
guard builder (``verify_guard_fn_signature`` in torch/_dynamo/utils.py) means
to reject that with a clear message, but itself reads ``fn.__self__``, which
a plain function lacks.  The resulting AttributeError is raised from inside
torch/_dynamo while building guards, i.e. after tracing succeeded, and Dynamo
re-wraps it.  No torch file is patched: this is a genuine bug in Dynamo's own
error path on torch 2.13, reached from user code.

Expected: exits non-zero with
``torch._dynamo.exc.InternalTorchDynamoError: AttributeError: 'function'
object has no attribute '__self__'`` (traceback ends in
torch/_dynamo/guards.py TENSOR_SUBCLASS_METADATA_MATCH).  Backend "eager".
"""

import torch
from torch.testing._internal.two_tensor import TwoTensor


class BadGuardTensor(TwoTensor):
    @staticmethod  # should be a classmethod taking (meta_a, meta_b)
    def __metadata_guard__(meta_a, meta_b):
        return meta_a == meta_b


@torch.compile(backend="eager")
def f(t):
    return t * 2


if __name__ == "__main__":
    f(BadGuardTensor(torch.ones(3), torch.ones(3)))
