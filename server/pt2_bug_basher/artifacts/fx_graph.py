"""FX graph printouts (fx_graph_readable.py, fx_graph_transformed.py): nodes, ops and inputs of the forward."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from pydantic import BaseModel, Field


class GraphInput(BaseModel):
    name: str
    annotation: str | None = Field(None, description='as printed, e.g. "f32[8, 8][8, 1]cpu"')
    dtype: str | None = None
    shape: str | None = None
    stride: str | None = None
    device: str | None = None



_DEF_RE = re.compile(r"^(\s*)def forward\(self,?\s*(.*)\):\s*$")
_ARG_RE = re.compile(r'(\w+)\s*(?::\s*"([^"]*)")?')
_NODE_RE = re.compile(r'^\s+(\w+)(?:\s*:\s*"[^"]*")?\s*=\s*(.+)$')
_ANNOT_RE = re.compile(
    r"^(?P<dtype>[a-z]+\d*)(?P<shape>\[[^\]]*\])(?P<stride>\[[^\]]*\])?(?P<device>[a-z]+(?::\d+)?)?$")
_BINOPS = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod", "**": "pow",
           "@": "matmul", "&": "and_", "|": "or_", "^": "xor", "<": "lt", ">": "gt", "<=": "le", ">=": "ge",
           "==": "eq", "!=": "ne"}
_BINOP_RE = re.compile(r"^\w+ (\*\*|//|<=|>=|==|!=|[-+*/%@&|^<>]) \S+$")


@dataclass
class FxGraphStats:
    node_count: int
    ops: Counter[str]
    inputs: list[GraphInput]
    subgraphs: int
    node_names: list[str]
    node_ops: dict[str, str]  # call node -> its op ("aten.relu.default")


def parse_annotation(annotation: str | None) -> dict[str, str | None]:
    if not annotation:
        return {}
    match = _ANNOT_RE.match(annotation.replace(" ", ""))
    if not match:
        return {}
    shape = match.group("shape")
    stride = match.group("stride")
    return {
        "dtype": match.group("dtype"),
        "shape": shape.replace(",", ", ") if shape else None,
        "stride": stride.replace(",", ", ") if stride else None,
        "device": match.group("device"),
    }


def _op_of(rhs: str, local_names: set[str]) -> str:
    rhs = rhs.split(";  ", 1)[0].strip()
    if rhs.startswith("torch.ops."):
        return rhs[len("torch.ops."):].split("(", 1)[0]
    call = re.match(r"^([\w.]+)\(", rhs)
    if call:
        target = call.group(1)
        head = target.split(".", 1)[0]
        if "." in target and head in local_names:
            return "Tensor." + target.rsplit(".", 1)[1]
        return target
    if re.match(r"^\w+\[", rhs):
        return "getitem"
    if rhs.startswith("self."):
        return "get_attr"
    binop = _BINOP_RE.match(rhs)
    if binop:
        return "operator." + _BINOPS.get(binop.group(1), binop.group(1))
    return "other"


def parse_fx_graph(text: str) -> FxGraphStats | None:
    """Node count, op counts and inputs of the top-level forward of an FX graph printout."""
    lines = text.splitlines()
    start = None
    indent = ""
    for number, line in enumerate(lines):
        match = _DEF_RE.match(line)
        if match:
            start, indent = number, match.group(1)
            break
    if start is None:
        return None
    signature = _DEF_RE.match(lines[start]).group(2)  # type: ignore[union-attr]
    inputs = []
    for arg in _ARG_RE.finditer(signature):
        annotation = arg.group(2)
        inputs.append(GraphInput(name=arg.group(1), annotation=annotation, **parse_annotation(annotation)))
    body_indent = len(indent) + 4
    ops: Counter[str] = Counter()
    names = [i.name for i in inputs]
    local = set(names)
    node_ops: dict[str, str] = {}
    saw_output = False
    subgraphs = sum(1 for line in lines if re.match(r"^\s+class \w+\(", line))
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if width < body_indent:
            break
        if width > body_indent or line.lstrip().startswith("#"):
            continue
        stripped = line.strip()
        if stripped.startswith("return"):
            saw_output = True
            continue
        node = _NODE_RE.match(line)
        if node is None:
            continue
        name, rhs = node.group(1), node.group(2)
        if rhs.strip() in local and rhs.strip() != name:
            # `l_x_ = L_x_`: Dynamo's local alias of an input, not a node.
            local.add(name)
            continue
        op = _op_of(rhs, local)
        ops[op] += 1
        node_ops[name] = op
        local.add(name)
        names.append(name)
    node_count = len(inputs) + sum(ops.values()) + (1 if saw_output else 0)
    return FxGraphStats(node_count, ops, inputs, subgraphs, names, node_ops)

