"""The regression sweep, run inside the interpreter under test: samples compiled against eager.

    python sweep_probe.py --spec SPEC.json --shard I/N [--deadline-s S]   # a shard of a sweep
    python sweep_probe.py --op NAME [--variant-test-name V] [--inplace] --sample K --dtype float32 \\
        [--requires-grad] --backend aot_eager [--dynamic]                 # one OpInfo sample again
    python sweep_probe.py --program FILE                                   # one program again

A spec names OpInfo ops (torch's `op_db`) and the circumstances to vary (dtypes, requires_grad,
backends, dynamic), and programs (files that compare compile against eager and raise on a mismatch).
Samples are enumerated in a fixed order from seeded sample inputs, so sample K of an op is the same
sample in every interpreter that has the same OpInfo. Each result is one `PT2BB-SWEEP: {json}`
line on stdout. Outcomes: pass; fail (compiled differs from eager, or a program's assertion or exit
status 3);
error (compiled raised where eager did not); skip (eager itself rejects the sample).
Imports nothing from pt2_bug_basher.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import time
import traceback

MARK = "PT2BB-SWEEP:"
# Ops whose outputs are random or uninitialised: compiled and eager cannot agree.
NONDETERMINISTIC_PREFIXES = ("rand", "normal", "bernoulli", "empty", "new_empty", "multinomial", "uniform",
                             "nn.functional.dropout", "nn.functional.feature_alpha_dropout",
                             "nn.functional.alpha_dropout",
                             "nn.functional.rrelu", "exponential", "geometric", "cauchy", "log_normal")
MESSAGE_CHARS = 400
MAX_FRAMES = 80
WRONG_RESULT_EXIT = 3  # a program that compares values itself reports a mismatch so (as repro scripts do)


def emit(record: dict) -> None:
    sys.stdout.write(f"{MARK} {json.dumps(record)}\n")
    sys.stdout.flush()


def op_index() -> dict:
    from torch.testing._internal.common_methods_invocations import op_db

    return {(op.name, op.variant_test_name): op for op in op_db}


def resolve(index: dict, name: str, variant: str):
    """The OpInfo for a name as the case wrote it (op name, aten name, or the last dotted part)."""
    if (name, variant) in index:
        return index[(name, variant)]
    base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    for (op_name, op_variant), op in index.items():
        if op_variant == variant and base in (op_name, op.aten_name, op_name.rsplit(".", 1)[-1]):
            return op
    return None


def _dtype(name: str):
    import torch

    value = getattr(torch, name, None)
    return value if isinstance(value, torch.dtype) else None


def enumerate_samples(spec: dict) -> tuple[list[dict], list[str]]:
    """Every sample key the spec asks for, in a fixed order; and the op names op_db lacks."""
    import torch

    index = op_index() if spec.get("ops") else {}
    keys: list[dict] = []
    unknown: list[str] = []
    limit = int(spec.get("max_samples_per_op", 4))
    for entry in spec.get("ops", []):
        name, variant = entry["op"], entry.get("variant_test_name", "")
        op = resolve(index, name, variant)
        if op is None or op.name.startswith(NONDETERMINISTIC_PREFIXES):
            unknown.append(name)
            continue
        inplace = bool(entry.get("inplace")) and op.inplace_variant is not None
        supported = op.supported_dtypes("cpu")
        for dtype_name in spec.get("dtypes", ["float32"]):
            dtype = _dtype(dtype_name)
            if dtype is None or dtype not in supported:
                continue
            for grad in spec.get("requires_grad", [False]):
                if grad and (not op.supports_autograd or not dtype.is_floating_point or inplace):
                    continue
                torch.manual_seed(0)
                count = sum(1 for _ in op.sample_inputs("cpu", dtype, requires_grad=grad))
                for sample in range(min(count, limit)):
                    for backend in spec.get("backends", ["aot_eager"]):
                        for dynamic in spec.get("dynamic", [False]):
                            keys.append({"kind": "op", "op": op.name, "variant_test_name": op.variant_test_name,
                                         "inplace": inplace, "sample": sample, "dtype": dtype_name,
                                         "requires_grad": bool(grad), "backend": backend, "dynamic": bool(dynamic)})
    for program in spec.get("programs", []):
        keys.append({"kind": "program", "name": program["name"], "file": program["file"]})
    return keys, unknown


def _clone(value):
    import torch
    from torch.utils._pytree import tree_map

    def one(x):
        if isinstance(x, torch.Tensor):
            copy = x.detach().clone()
            return copy.requires_grad_(x.requires_grad) if x.is_leaf or x.requires_grad else copy
        return x

    return tree_map(one, value)


def _leaves(value) -> list:
    import torch
    from torch.utils._pytree import tree_leaves

    return [x for x in tree_leaves(value) if isinstance(x, torch.Tensor)]


def _run(fn, arguments, grad: bool):
    """fn's outputs, the arguments after the call (in-place ops write them), and the inputs' gradients."""
    args, kwargs = arguments
    out = fn(*args, **kwargs)
    grads = []
    if grad:
        outputs = [o for o in _leaves(out) if o.requires_grad and o.is_floating_point()]
        inputs = [x for x in _leaves((args, kwargs)) if x.requires_grad and x.is_leaf]
        if outputs and inputs:
            import torch

            loss = sum(o.sum() for o in outputs)
            grads = list(torch.autograd.grad(loss, inputs, allow_unused=True))
    return out, (args, kwargs), grads


def _same(compiled, eager) -> None:
    """Tensors compare with assert_close; other leaves (a dtype, a device string, a size) by equality."""
    import torch
    from torch.utils._pytree import tree_flatten

    got, got_spec = tree_flatten(compiled)
    want, want_spec = tree_flatten(eager)
    if got_spec != want_spec:
        raise AssertionError(f"structures differ: {got_spec} against {want_spec}")
    for g, w in zip(got, want, strict=True):
        if isinstance(g, torch.Tensor) or isinstance(w, torch.Tensor):
            torch.testing.assert_close(g, w, equal_nan=True, check_device=False)
        elif g != w:
            raise AssertionError(f"{g!r} against {w!r}")


def run_op_sample(index: dict, key: dict) -> tuple[str, str]:
    import torch
    import torch._dynamo

    op = resolve(index, key["op"], key["variant_test_name"])
    if op is None:
        return "error", f"sweep probe: op_db has no op {key['op']!r}"
    dtype = _dtype(key["dtype"])
    torch.manual_seed(0)
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=key["requires_grad"]))
    sample = samples[key["sample"]]
    fn = op.inplace_variant if key["inplace"] else op.op
    args, kwargs = [sample.input, *sample.args], dict(sample.kwargs)
    try:
        eager = _run(fn, _clone((args, kwargs)), key["requires_grad"])
    except Exception as exc:  # the sample is not valid here: nothing to compare
        return "skip", f"eager raised {type(exc).__name__}: {exc}"
    torch._dynamo.reset()

    def call(*a, **kw):
        return fn(*a, **kw)

    compiled_fn = _exported(call) if key["backend"] == "export" else \
        torch.compile(call, backend=key["backend"], dynamic=key["dynamic"])
    try:
        compiled = _run(compiled_fn, _clone((args, kwargs)), key["requires_grad"])
    except Exception as exc:
        return "error", f"{type(exc).__name__}: {exc}"
    for what, got, want in zip(("output", "arguments after the call", "gradients"), compiled, eager, strict=True):
        try:
            _same(got, want)
        except AssertionError as exc:
            return "fail", f"{what} differ: {exc}"
        except Exception as exc:  # structures that do not compare (None against a tensor, ...)
            return "fail", f"{what} differ: {type(exc).__name__}: {exc}"
    return "pass", ""


def _exported(fn):
    """fn through torch.export.export(...).run_decompositions().module(), exported afresh for each call."""
    import torch

    class Call(torch.nn.Module):
        def forward(self, *args, **kwargs):
            return fn(*args, **kwargs)

    def run(*args, **kwargs):
        return torch.export.export(Call(), tuple(args), kwargs).run_decompositions().module()(*args, **kwargs)

    return run


def run_program(path: str) -> tuple[str, str, list[str]]:
    """(outcome, message, the failure's traceback frames as file:line, innermost last)."""
    import torch._dynamo

    torch._dynamo.reset()
    try:
        runpy.run_path(path, run_name="__main__")
    except AssertionError as exc:
        return "fail", f"AssertionError: {exc}", _frames(exc)
    except SystemExit as exc:
        if exc.code in (0, None):
            return "pass", "", []
        if exc.code == WRONG_RESULT_EXIT:  # the program's own comparison, reported by its exit status
            return "fail", f"exit status {exc.code}", []
        return "error", f"exit status {exc.code}", _frames(exc)
    except Exception as exc:
        tb = traceback.extract_tb(exc.__traceback__)
        frame = f" ({tb[-1].filename}:{tb[-1].lineno})" if tb else ""
        return "error", f"{type(exc).__name__}: {exc}{frame}", _frames(exc)
    return "pass", "", []


def _frames(exc: BaseException) -> list[str]:
    return [f"{f.filename}:{f.lineno}" for f in traceback.extract_tb(exc.__traceback__)][-MAX_FRAMES:]


def run_one(index: dict, key: dict) -> dict:
    started = time.monotonic()
    frames: list[str] = []
    try:
        if key["kind"] == "program":
            outcome, message, frames = run_program(key["file"])
        else:
            outcome, message = run_op_sample(index, key)
    except Exception as exc:  # the probe's own failure on this sample (a sample index past the end, ...)
        outcome, message = "error", f"sweep probe: {type(exc).__name__}: {exc}"
    record = {"key": key, "outcome": outcome, "message": message[:MESSAGE_CHARS],
              "seconds": round(time.monotonic() - started, 3)}
    if frames:
        record["frames"] = frames
    return record


def sweep(spec_path: str, shard: str, deadline_s: float | None) -> int:
    started = time.monotonic()
    with open(spec_path) as fh:
        spec = json.load(fh)
    mine, count = (int(part) for part in shard.split("/"))
    keys, unknown = enumerate_samples(spec)
    planned = keys[mine::count]
    emit({"planned": planned, "total": len(keys), "unknown_ops": unknown if mine == 0 else []})
    index = op_index() if any(key["kind"] == "op" for key in planned) else {}
    for key in planned:
        if deadline_s is not None and time.monotonic() - started > deadline_s:
            emit({"key": key, "outcome": "not_run", "message": "the sweep's time budget ran out", "seconds": 0})
            continue
        emit({"start": key})
        emit(run_one(index, key))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec")
    parser.add_argument("--shard", default="0/1")
    parser.add_argument("--deadline-s", type=float)
    parser.add_argument("--op")
    parser.add_argument("--variant-test-name", default="")
    parser.add_argument("--inplace", action="store_true")
    parser.add_argument("--sample", type=int, default=0)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--requires-grad", action="store_true")
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--dynamic", action="store_true")
    parser.add_argument("--program")
    args = parser.parse_args(argv)
    if args.spec:
        return sweep(args.spec, args.shard, args.deadline_s)
    if args.program:
        key = {"kind": "program", "name": args.program, "file": args.program}
    elif args.op:
        key = {"kind": "op", "op": args.op, "variant_test_name": args.variant_test_name, "inplace": args.inplace,
               "sample": args.sample, "dtype": args.dtype, "requires_grad": args.requires_grad,
               "backend": args.backend, "dynamic": args.dynamic}
    else:
        parser.error("give --spec, --op or --program")
    result = run_one(op_index() if key["kind"] == "op" else {}, key)
    emit(result)
    if result["outcome"] != "pass":
        print(f"{result['outcome']}: {result['message']}", file=sys.stderr)
    return 0 if result["outcome"] in ("pass", "skip") else 1


if __name__ == "__main__":
    sys.exit(main())
