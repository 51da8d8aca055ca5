# Source: https://github.com/pytorch/pytorch/issues/175841
# Label: dynamo_internal
# Failure: a Tensor subclass whose __torch_function__ unwraps every argument with as_subclass(torch.Tensor)
#   crashes Dynamo while it wraps the input: the issue saw InternalTorchDynamoError(RecursionError); on 2.13
#   Dynamo's own size query re-enters the override and fails with InternalTorchDynamoError(AttributeError).
# Why this label: Dynamo itself crashes (InternalTorchDynamoError) on code that runs in eager.
import torch


class Unwrapping(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        plain = [a.as_subclass(torch.Tensor) for a in args]
        return func(*plain)


def wave(t):
    return torch.cos(t)


x = torch.randn(5).as_subclass(Unwrapping)
print("eager:", wave(x))
print("compiled:", torch.compile(wave, backend="eager")(x))
