"""Is a repro already minimal? Judged from its source alone, before any reducer runs.

Two counts decide: the statements of the script (imports, docstrings and `pass` left out; nested
statements counted) and the ops the compiled code calls: every call, operator, comparison and
subscript in the body of what `torch.compile` / `torch._dynamo.optimize` / `torch.export.export` is
applied to (a function, a lambda, or a module's `forward`), following calls into functions and methods
the script defines.
When the compiled code cannot be found, the repro is not judged minimal: the reducer decides.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

MAX_STATEMENTS = 10
MAX_COMPILED_OPS = 2  # `torch.pow(x, 3) + 1`: the op and what makes a kernel of it
# Small, though not minimal: a reduction can only polish it, so it gets a short budget.
SMALL_STATEMENTS = 16
SMALL_COMPILED_OPS = 8
# Agents saw 120 s spent to drop one statement of an eleven-statement repro: polishing gets a minute.
POLISH_BUDGET_S = 60.0
_COMPILERS = {"compile", "optimize", "optimize_assert", "export"}

Body = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


@dataclass(frozen=True)
class Minimality:
    statements: int
    compiled_ops: int | None
    """ops in the compiled code; None when the compiled code could not be found"""
    compiled: list[str] = field(default_factory=list)
    why_not: str | None = None
    """why it is not minimal; None: it is"""

    @property
    def minimal(self) -> bool:
        return self.why_not is None

    @property
    def small(self) -> bool:
        """Minimal, or close: few statements and few compiled ops."""
        return 0 <= self.statements <= SMALL_STATEMENTS and self.compiled_ops is not None \
            and self.compiled_ops <= SMALL_COMPILED_OPS

    @property
    def polish_budget_s(self) -> float:
        """The source reducer's budget for a small repro: only a few statements can go."""
        return POLISH_BUDGET_S

    def describe(self) -> str:
        ops = "compiled code not found" if self.compiled_ops is None else (
            f"{self.compiled_ops} op" + ("" if self.compiled_ops == 1 else "s") + " in the compiled function")
        return f"{self.statements} statements, {ops}"

    def sizes(self) -> dict[str, int]:
        sizes = {"statements": self.statements}
        if self.compiled_ops is not None:
            sizes["compiled_ops"] = self.compiled_ops
        return sizes


def judge(source: str) -> Minimality:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return Minimality(-1, None, why_not="the script does not parse")
    statements = count_statements(tree)
    found = _Script(tree)
    bodies, unresolved = found.compiled()
    if unresolved or not bodies:
        why = f"cannot tell what {unresolved} compiles" if unresolved else "no torch.compile or torch.export call found"
        return Minimality(statements, None, why_not=why)
    ops = sum(found.ops(body, {}, set()) for body in bodies)
    names = [getattr(b, "name", "<lambda>") for b in bodies]
    why_not = None
    if statements > MAX_STATEMENTS:
        why_not = f"{statements} statements (more than {MAX_STATEMENTS})"
    elif ops > MAX_COMPILED_OPS:
        why_not = f"{ops} ops in the compiled code (more than {MAX_COMPILED_OPS})"
    return Minimality(statements, ops, names, why_not)


def count_statements(tree: ast.AST) -> int:
    """The statements of a script, nested ones counted; imports, `pass` and docstrings left out."""
    return sum(_counts(node) for node in ast.walk(tree))


def _counts(node: ast.AST) -> bool:
    if not isinstance(node, ast.stmt) or isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass)):
        return False
    docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value,
                                                                                                   str)
    return not docstring


def _dotted(node: ast.expr) -> list[str] | None:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return base + [node.attr] if base is not None else None
    return None


def _constant(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) or (isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant))


# `float("inf")`, `int(3)`: a Python number written as a call, not an op of the compiled code
_NUMBER_TYPES = {"float", "int", "bool", "complex"}


def _number_literal(node: ast.Call) -> bool:
    return (isinstance(node.func, ast.Name) and node.func.id in _NUMBER_TYPES and not node.keywords
            and all(_constant(a) for a in node.args))


class _Script:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.torch_names = {"torch"}
        self.functions: dict[str, Body] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.assigned: dict[str, ast.expr] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "torch" or alias.name.startswith("torch."):
                        self.torch_names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
                self.torch_names.update(alias.asname or alias.name for alias in node.names)
        for stmt in tree.body:  # module level: what a name means where torch.compile is called
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = stmt
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.assigned[node.targets[0].id] = node.value

    def _compiler(self, node: ast.expr) -> str | None:
        """'compile', 'optimize' or 'export' when node names one of torch's compile entry points."""
        name = _dotted(node)
        if name and name[0] in self.torch_names and name[-1] in _COMPILERS:
            return name[-1]
        return None

    def compiled(self) -> tuple[list[Body], str | None]:
        """The bodies torch.compile applies to, and the source of the first target it cannot resolve."""
        targets: list[ast.AST] = []
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for dec in node.decorator_list:
                    if self._compiler(dec.func if isinstance(dec, ast.Call) else dec):
                        targets.append(node)
            elif isinstance(node, ast.Call):
                if self._compiler(node.func) in ("compile", "export") and node.args:
                    targets.append(node.args[0])  # torch.compile(fn, ...), torch.export.export(module, args)
                elif isinstance(node.func, ast.Call) and node.args:
                    kind = self._compiler(node.func.func)  # torch.compile(backend=...)(fn), optimize("eager")(fn)
                    if kind is not None and (kind != "compile" or not node.func.args):
                        targets.append(node.args[0])
        bodies: list[Body] = []
        for target in targets:
            body = self._resolve(target, 0)
            if body is None:
                return bodies, ast.unparse(target)[:80] if isinstance(target, ast.expr) else "?"
            bodies.append(body)
        return bodies, None

    def _resolve(self, target: ast.AST, depth: int) -> Body | None:
        if isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return target
        if depth > 4 or not isinstance(target, ast.expr):
            return None
        if isinstance(target, ast.Name):
            if target.id in self.functions:
                return self.functions[target.id]
            if target.id in self.assigned:
                return self._resolve(self.assigned[target.id], depth + 1)
            return None
        while isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute):
            target = target.func.value  # Model().eval().to(device): the module is Model()
        if isinstance(target, ast.Call) and isinstance(target.func, ast.Name) and target.func.id in self.classes:
            return _method(self.classes[target.func.id], "forward")
        return None

    def ops(self, body: Body, methods: dict[str, Body], seen: set[int]) -> int:
        """Ops the body calls, following calls into the script's own functions and methods."""
        seen = seen | {id(body)}
        if not methods and not isinstance(body, ast.Lambda):
            owner = next((c for c in self.classes.values() if body in c.body), None)
            methods = {n.name: n for n in owner.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} \
                if owner is not None else {}
        statements: list[ast.AST] = [body.body] if isinstance(body, ast.Lambda) else list(body.body)
        count = 0
        for stmt in statements:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and _number_literal(node):
                    continue
                if isinstance(node, ast.Call):
                    callee = self._own(node.func, methods)
                    recurse = callee is not None and id(callee) not in seen
                    count += self.ops(callee, methods, seen) if callee is not None and recurse else 1
                elif isinstance(node, ast.BinOp):
                    count += not (_constant(node.left) and _constant(node.right))
                elif isinstance(node, ast.UnaryOp):
                    count += not _constant(node.operand)
                elif isinstance(node, ast.Compare):
                    count += not all(_constant(n) for n in (node.left, *node.comparators))
                elif isinstance(node, (ast.AugAssign, ast.BoolOp)) or (
                        isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)):
                    count += 1
        return count

    def _own(self, func: ast.expr, methods: dict[str, Body]) -> Body | None:
        """The script's own function (or method, called on self) that a call calls."""
        if isinstance(func, ast.Name):
            return self.functions.get(func.id)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            return methods.get(func.attr)
        return None


def _method(cls: ast.ClassDef, name: str) -> Body | None:
    return next((n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name),
                None)
