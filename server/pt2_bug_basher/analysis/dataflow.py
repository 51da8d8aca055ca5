"""What the wrapper of an output_code.py does: which call writes which buffer, and what the graph returns.

Inductor's wrapper (`def call(self, args)`) is plain Python: buffers are allocated, kernels and extern
calls write them, buffers are reused under new names (`buf1 = buf0; del buf0  # reuse`,
`reinterpret_tensor(buf0, ...)`), and a tuple of buffers is returned. Kernel arguments follow the
kernel's parameters: `in_ptr*` are read, `out_ptr*` written, `in_out_ptr*` both.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from pt2_bug_basher.analysis.output_code import Kernel, OutputCode, handle_above

# Wrapper helpers that view a buffer, and those that allocate or check one: no computation.
_ALIASES = ("reinterpret_tensor", "as_strided")
_NOT_COMPUTE = ("empty", "zeros", "alloc_from_pool", "assert_", "get_raw_stream", "set_device",
                "run_intermediate_hooks", "synchronize", "clear")


@dataclass
class Call:
    line: int
    callee: str
    kernel: Kernel | None
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    handle: str | None = None  # its provenance debug handle, when Inductor wrote one
    params: dict[str, str] = field(default_factory=dict)  # buffer passed -> the kernel parameter it is passed as


@dataclass
class DataFlow:
    outputs: list[str | None]  # the buffer behind each returned value (None: not a buffer)
    calls: list[Call]
    _alias: dict[str, str]

    def root(self, name: str) -> str:
        seen = set()
        while name in self._alias and name not in seen:
            seen.add(name)
            name = self._alias[name]
        return name

    def writer(self, buffer: str, before: int | None = None) -> int | None:
        """Index of the last call (before `before`) that writes the buffer, under any of its names."""
        wanted = self.root(buffer)
        stop = len(self.calls) if before is None else before
        for index in range(stop - 1, -1, -1):
            if any(self.root(w) == wanted for w in self.calls[index].writes):
                return index
        return None


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _first_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call) and _dotted(node.func).rsplit(".", 1)[-1] in _ALIASES and node.args:
        return _first_name(node.args[0])
    return None


def _flat(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, (ast.With, ast.If, ast.For)):
            out += _flat(stmt.body)
        else:
            out.append(stmt)
    return out


def _call_function(tree: ast.Module) -> ast.FunctionDef | None:
    """The wrapper's `call`: a method of `Runner` (torch 2.8+) or a module-level function."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node
    return None


def _call_step(stmt: ast.stmt, code: OutputCode) -> Call | None:
    target: str | None = None
    value: ast.expr | None = None
    if isinstance(stmt, ast.Expr):
        value = stmt.value
    elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        target, value = stmt.targets[0].id, stmt.value
    if not isinstance(value, ast.Call):
        return None
    callee = _dotted(value.func)
    if not callee or callee.rsplit(".", 1)[-1].startswith(_NOT_COMPUTE):
        return None
    kernel = code.kernel_named(callee.removesuffix(".run"))
    args = [_first_name(a) for a in value.args]
    step = Call(stmt.lineno, callee, kernel, handle=handle_above(code.lines, stmt.lineno))
    if kernel is not None:
        params = kernel.params()
        for position, arg in enumerate(args):
            if arg is None:
                continue
            param = params[position] if position < len(params) else ""
            if param:
                step.params.setdefault(arg, param)
            if param.startswith(("out_ptr", "in_out_ptr")) or not params:
                step.writes.append(arg)
            if not param.startswith("out_ptr"):
                step.reads.append(arg)
        return step
    step.reads = [a for a in args if a]
    step.writes = [n for kw in value.keywords if kw.arg == "out" and (n := _first_name(kw.value))]
    if target:
        step.writes.append(target)
    return step


def data_flow(code: OutputCode) -> DataFlow | None:
    """The wrapper's calls and returned buffers; None when the module does not parse or has no `call`."""
    try:
        tree = ast.parse("\n".join(code.lines))
    except (SyntaxError, ValueError):
        return None
    function = _call_function(tree)
    if function is None:
        return None
    calls: list[Call] = []
    alias: dict[str, str] = {}
    outputs: list[str | None] = []
    for stmt in _flat(function.body):
        if isinstance(stmt, ast.Return):
            values = stmt.value.elts if isinstance(stmt.value, (ast.Tuple, ast.List)) else (
                [stmt.value] if stmt.value is not None else [])
            outputs = [_first_name(v) for v in values]
            break
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            source = _first_name(stmt.value)
            if source is not None and source != stmt.targets[0].id:
                alias[stmt.targets[0].id] = source
                continue
        step = _call_step(stmt, code)
        if step is not None:
            calls.append(step)
    return DataFlow(outputs, calls, alias)
