# label: dynamo_internal
# subcategory: a KeyError raised inside Dynamo's own tracing code (simulated internal bug: one Dynamo
#   helper is patched to raise) -> InternalTorchDynamoError
import torch
import torch._dynamo.variables.builtin as builtin


def _broken(self, tx, args, kwargs):
    raise KeyError("missing_handler_key")


if __name__ == "__main__":
    builtin.BuiltinVariable.call_function = _broken

    @torch.compile(backend="eager")
    def forward(x):
        return abs(x) + len([1, 2])

    forward(torch.randn(4))
