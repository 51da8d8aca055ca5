"""What a case's sweep covers: the ops of its graphs and sources, its backend, the circumstances localize
varied, and the Dynamo/AOTAutograd patterns (mutation, views, aliasing, containers) around its bug.

Pure functions over text the case already holds; `steps/verify.py` gathers that text from the store.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from pt2_bug_basher.execution.sweep import OpSpec, ProgramSpec, SweepSpec

MAX_OPS = 8
# aten calls in FX graphs, generated code and graph logs: torch.ops.aten.pow.Tensor_Scalar, aten.add_.Tensor
_ATEN = re.compile(r"\baten\.([A-Za-z_]\w*)")
_BINOPS: dict[type[ast.operator], str] = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
                                          ast.Pow: "pow", ast.MatMult: "matmul", ast.FloorDiv: "floor_divide",
                                          ast.Mod: "remainder"}
# Calls that build or check inputs, never the computation a graph holds.
_NOT_OPS = frozenset({"compile", "manual_seed", "assert_close", "print", "range", "len", "list", "tuple", "dict",
                      "item", "tolist", "numpy", "backward", "requires_grad_", "detach", "clone", "to", "cpu",
                      "contiguous", "size", "dim", "numel", "reset", "allclose", "equal"})
# The layers whose bugs the pattern programs exercise (localize's names).
PATTERN_LAYERS = frozenset({"Dynamo", "AOTAutograd", "Dynamo guards", "dynamic shapes", "export"})
DYNAMIC_LAYER = "dynamic shapes"
EXPORT_LAYER = "export"
EXPORT = "export"
"""the sweep's name for torch.export.export(...).run_decompositions().module() in place of a backend"""


def ops_in_graph_text(text: str) -> list[str]:
    """aten op names (in-place ones keep their trailing _) in graph code or logs, in order of appearance."""
    return list(dict.fromkeys(m.group(1) for m in _ATEN.finditer(text) if m.group(1) not in _NOT_OPS))


def ops_in_source(source: str) -> list[str]:
    """Op names called in a Python source's functions (the code a repro compiles), in order: torch.X(...),
    F.X(...), x.X(...), and arithmetic operators (x * y: mul; x += y: add_). Module-level calls (input
    building) count only when no function has any."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    inside: list[str] = []
    outside: list[str] = []
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    in_function = {id(n) for f in functions for n in ast.walk(f)}
    for node in ast.walk(tree):
        name = _op_name(node)
        if name and name not in _NOT_OPS:
            (inside if id(node) in in_function else outside).append(name)
    return list(dict.fromkeys(inside or outside))


def _op_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr
    if isinstance(node, ast.BinOp):
        return _BINOPS.get(type(node.op))
    if isinstance(node, ast.AugAssign):
        base = _BINOPS.get(type(node.op))
        return f"{base}_" if base else None
    return None


_BACKEND = re.compile(r"""\bbackend\s*=\s*["']([\w.]+)["']""")
_DYNAMIC = re.compile(r"\bdynamic\s*=\s*True\b")
_DTYPES = ("float64", "float16", "bfloat16")
PATTERN_HINTS: dict[str, re.Pattern[str]] = {
    "mutation": re.compile(r"\.\w+_\(|\bcopy_\b|\]\s*[+\-*/]?=[^=]|\+=|\*=|-="),
    "views": re.compile(r"\.(view|reshape|transpose|permute|t|unsqueeze|squeeze|expand|narrow|select|as_strided)\(|"
                        r"\[[^\]]*:[^\]]*\]"),
    "aliasing": re.compile(r"\breturn\b[^\n]*\b(x|inp|input|a|self)\b\s*(,|$)", re.M),
    "containers": re.compile(r"\bdef \w+\([^)]*\b(xs|lst|items|d|inputs)\b|\[\s*torch\.|\{\s*['\"]\w+['\"]\s*:"),
    "side_effects": re.compile(r"\.(pop|popitem|clear|update|setdefault|append|extend|insert|remove)\(|"
                               r"\bdel\s+\w+\[|\b\w+\[['\"]\w+['\"]\]\s*=[^=]"),
}


@dataclass
class CaseSweepInputs:
    """What the case holds that the sweep is built from."""

    sources: list[str] = field(default_factory=list)
    """Python sources the case compiles: the repro, the reduced repro"""
    graph_texts: list[str] = field(default_factory=list)
    """FX graphs, generated code and logged graphs of the case's runs"""
    layer: str | None = None
    """localize's layer (playbooks.layer_of)"""
    first_failing: str | None = None
    """localize's first failing backend"""
    localize_dynamic: bool = False
    """localize's table ran the failing rung with dynamic=True"""


def case_spec(inputs: CaseSweepInputs, *, max_samples_per_op: int = 3) -> tuple[SweepSpec, list[str]]:
    """The case's sweep, and why each choice was made (lines for notes)."""
    why: list[str] = []
    names: list[str] = []
    for text in inputs.graph_texts:
        names.extend(ops_in_graph_text(text))
    from_graphs = len(dict.fromkeys(names))
    for source in inputs.sources:
        names.extend(ops_in_source(source))
    names = list(dict.fromkeys(names))[:MAX_OPS]
    ops = [OpSpec(op=n.rstrip("_"), inplace=n.endswith("_") and not n.endswith("__")) for n in names]
    why.append(f"ops: {', '.join(names) or 'none found'} ({from_graphs} from the case's graphs and logs, the rest "
               "from its sources)")
    joined = "\n".join(inputs.sources)
    found = _BACKEND.search(joined)
    backend = found.group(1) if found else (inputs.first_failing or "inductor")
    if inputs.layer == EXPORT_LAYER:  # the case reaches the compiler through torch.export: sweep that path
        backend = EXPORT
        why.append("export: each sample runs through torch.export.export(...).run_decompositions().module()")
    else:
        why.append(f"backend {backend}: " + ("the repro's" if found else "localize's first failing rung"
                                            if inputs.first_failing else "torch.compile's default"))
    dynamic = [False, True] if (inputs.localize_dynamic or inputs.layer == DYNAMIC_LAYER or _DYNAMIC.search(joined)) \
        else [False]
    dtypes = ["float32", *(d for d in _DTYPES if re.search(rf"\b{d}\b", joined))]
    programs: list[ProgramSpec] = []
    if inputs.layer in PATTERN_LAYERS:
        hinted = [name for name, hint in PATTERN_HINTS.items() if hint.search(joined)] or list(PATTERNS)
        programs = pattern_programs(hinted, backend, dynamic)
        why.append(f"{inputs.layer} patterns: {', '.join(hinted)}")
    spec = SweepSpec(ops=ops, programs=programs, dtypes=dtypes, requires_grad=[False, True], backends=[backend],
                     dynamic=dynamic, max_samples_per_op=max_samples_per_op)
    return spec, why


# Pattern programs: f's body per pattern; each runs f eagerly and compiled on a fresh clone of one input
# (with or without requires_grad) and compares outputs, the mutated input and the gradient. The gradient
# flows through the input after the call too, so a mutation hidden from autograd shows.
PATTERNS: dict[str, list[tuple[str, str]]] = {
    "mutation": [
        ("input_add_", "    x.add_(1)\n    return x * 2"),
        ("input_slice_mul_", "    x[0].mul_(3)\n    return x.sum(0)"),
        ("metadata_t_", "    x.t_()\n    return x + 1"),
    ],
    "views": [
        ("view_chain", "    return x.transpose(0, 1).reshape(-1)[2:] * 2"),
        ("view_then_mutate", "    y = x.view(-1)\n    y.add_(1)\n    return x * y.sum()"),
    ],
    "aliasing": [
        ("alias_output", "    return x.view(-1), x * 2"),
        ("alias_input_output", "    x.mul_(2)\n    return x"),
    ],
    "containers": [
        ("list_and_dict", "    parts = [x[0], x[1] * 2]\n    return {\"sum\": parts[0] + parts[1], \"parts\": parts}"),
    ],
    # the caller's dict and list, mutated inside f: Dynamo writes the mutations back after the graph ran
    "side_effects": [
        ("dict_pop_setitem", "    s = state.pop(\"scale\")\n    state[\"calls\"] = state.get(\"calls\", 0) + 1\n"
                             "    return x * s"),
        ("dict_pop_only", "    return x * state.pop(\"scale\")"),
        ("dict_del_update", "    del state[\"scale\"]\n    state.update(extra=2.0)\n    return x + 1"),
        ("dict_clear_setitem", "    state.clear()\n    state[\"calls\"] = 1\n    return x - 1"),
        ("list_append_pop", "    seen.append(3)\n    seen.pop(0)\n    return x * len(seen)"),
    ],
}
NO_EXPORT = frozenset({"side_effects"})  # torch.export does not write the caller's containers back

_HARNESS = '''\
import torch


def f(x, state=None, seen=None):
{body}


def run(fn):
    torch.manual_seed(0)
    base = torch.randn(4, 4, requires_grad={grad})
    x = base.clone()
    state, seen = {{"scale": 2.0, "keep": 1.0}}, [1, 2]
    out = fn(x, state, seen)
    result = [out, x.detach(), state, seen]
    if {grad}:
        leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
        sum((t.sum() for t in leaves), x.sum()).backward()
        result.append(base.grad)
    return result


def exported(fn):
    class Call(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    return lambda x, *_: torch.export.export(Call(), (x,)).run_decompositions().module()(x)


torch.testing.assert_close(run({compiled}), run(f))
'''


def pattern_programs(patterns: list[str], backend: str, dynamic: list[bool]) -> list[ProgramSpec]:
    programs = []
    for pattern in patterns:
        if backend == EXPORT and pattern in NO_EXPORT:
            continue
        for name, body in PATTERNS.get(pattern, []):
            for grad in (False, True):
                for dyn in dynamic:
                    label = f"{name}-{'grad' if grad else 'nograd'}-{backend}{'-dynamic' if dyn else ''}"
                    compiled = "exported(f)" if backend == EXPORT else \
                        f"torch.compile(f, backend={backend!r}, dynamic={dyn})"
                    programs.append(ProgramSpec(name=label, code=_HARNESS.format(body=body, grad=grad,
                                                                                 compiled=compiled)))
    return programs
