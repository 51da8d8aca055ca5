"""OpInfo samples (op_db), inference and with grad, in one graph under AOTAutograd with decompositions and
the partitioner (backend aot_eager_decomp_partition), against eager."""

import sys

import torch
from torch.testing._internal.common_methods_invocations import op_db

OPS = ["add", "sub", "div", "where", "clamp", "softmax", "log_softmax", "mean", "var", "std", "addmm", "bmm",
       "stack", "permute", "gather", "abs", "tanh", "nn.functional.gelu", "nn.functional.silu",
       "nn.functional.layer_norm", "log1p", "rsqrt", "pow", "norm", "roll", "narrow", "repeat", "cumsum", "topk",
       "masked_fill", "lerp", "hardtanh", "nn.functional.mse_loss", "nn.functional.cross_entropy", "logsumexp",
       "nn.functional.embedding", "baddbmm", "addcmul", "tril", "split", "squeeze", "select", "prod", "max",
       "argmax", "nn.functional.pad", "full_like", "maximum", "nn.functional.batch_norm", "diag", "expand",
       "index_put", "scatter_add", "nn.functional.softplus", "nn.functional.smooth_l1_loss", "sort", "trace"]


def check(name, got, want):
    try:
        torch.testing.assert_close(got, want, equal_nan=True, atol=1e-4, rtol=1e-4)
    except AssertionError as err:
        print(f"WRONG RESULT {name}: {err}", file=sys.stderr)
        sys.exit(3)


def tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    return []


def pick(grad):
    chosen = []
    infos = {info.name: info for info in op_db if info.name in OPS and info.variant_test_name == ""}
    for name in OPS:
        info = infos.get(name)
        if info is None or (grad and not info.supports_autograd):
            continue
        sample = next(iter(info.sample_inputs("cpu", torch.float32, requires_grad=grad)))
        chosen.append((name, info.op, sample))
    return chosen


def all_ops(chosen, inputs):
    return [op(inp, *args, **kwargs) for (name, op, sample), (inp, args, kwargs) in zip(chosen, inputs, strict=True)]


def run():
    torch.manual_seed(0)
    for grad in (False, True):
        chosen = pick(grad)
        inputs = [(s.input, s.args, s.kwargs) for _, _, s in chosen]
        torch._dynamo.reset()
        got = torch.compile(all_ops, backend="aot_eager_decomp_partition")(chosen, inputs)
        want = all_ops(chosen, inputs)
        for (name, _, _), g, w in zip(chosen, got, want, strict=True):
            check(f"{name}{' grad' if grad else ''}", g, w)
        if grad:
            leaves = [t for _, _, s in chosen for t in tensors(s.input) if t.requires_grad]
            outs = [t.sum() for t in tensors(got) if t.requires_grad and t.is_floating_point()]
            refs = [t.sum() for t in tensors(want) if t.requires_grad and t.is_floating_point()]
            check("backward", torch.autograd.grad(sum(outs), leaves, allow_unused=True),
                  torch.autograd.grad(sum(refs), leaves, allow_unused=True))


if __name__ == "__main__":
    run()
