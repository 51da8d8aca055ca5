"""Near-miss variants of a repro: the same program with one thing changed, run side by side.

A variant that passes where the repro fails says what the failure needs ("fails only when `x`
requires grad", "passes with `add` instead of `add_`"), and its spectrum is what separates the
guilty lines of torch from those every run goes through (analysis/spectra.py). Program edits are
made on the syntax tree: an in-place op made out-of-place, `requires_grad` switched off on a tensor
input, a tensor input made float64, one statement removed.
"""

from __future__ import annotations

import ast
import copy
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.compare import RERUN_OR_ACCURACY, run_failure, same_failure
from pt2_bug_basher.analysis.spectra import Spectrum
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.execution.runs import ProgressFn, execute, with_spectrum
from pt2_bug_basher.execution.warm import WarmRequest

VariantKind = Literal["out_of_place", "no_requires_grad", "float64", "statement_removed", "near_miss"]
# "fails uncompiled too": it fails the case's way with compilation off as well, so its edit broke the program
# itself (a removed statement its own check needs), not the compiler: no evidence either way
Outcome = Literal["same failure", "passes", "different failure", "timeout", "fails uncompiled too"]
UNCOMPILED_ENV = {"TORCHDYNAMO_DISABLE": "1"}
# the edits that can break the program itself, so a failure the case's way is checked with compilation off too
CAN_BREAK_THE_PROGRAM: frozenset[VariantKind] = frozenset({"statement_removed", "near_miss"})
# the order generated variants are tried in (the budget cuts the tail): edits that keep the program's meaning first;
# the agent's own near misses (`near_miss`) run before them all
KIND_ORDER: tuple[VariantKind, ...] = ("no_requires_grad", "out_of_place", "float64", "statement_removed")
FACTORIES = frozenset({"randn", "rand", "ones", "zeros", "full", "empty", "linspace", "arange", "tensor",
                       "randn_like", "rand_like", "ones_like", "zeros_like", "full_like", "empty_like"})
FLOAT_FACTORIES = FACTORIES - {"arange", "tensor"}  # their default dtype follows their arguments
# in-place methods without an out-of-place twin of the same name less the underscore
NOT_INPLACE = frozenset({"copy_", "set_", "requires_grad_", "resize_", "resize_as_", "share_memory_", "zero_",
                         "fill_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_", "geometric_",
                         "cauchy_", "log_normal_", "manual_seed_", "retain_grad_", "record_stream_"})
MAX_VARIANTS = 8
MIN_VARIANTS = 2  # run whatever the budget: the first of the first kinds (waiting for a core counts against it)
DEFAULT_BUDGET_S = 90.0


@dataclass(frozen=True)
class Variant:
    id: str
    kind: VariantKind
    change: str
    """the one thing it changed, in words"""
    line: int
    source: str


class VariantOutcome(BaseModel):
    id: str
    kind: VariantKind
    change: str
    line: int = Field(description="the repro's line it changed")
    outcome: Outcome
    run_id: str


def _call_name(node: ast.AST) -> str | None:
    """`randn` for torch.randn(...), `add_` for x.add_(...)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _target(tree: ast.Module, call: ast.Call) -> str:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and node.value is call and len(node.targets) == 1:
            return ast.unparse(node.targets[0])
        if isinstance(node, ast.Assign) and any(sub is call for sub in ast.walk(node.value)):
            return ast.unparse(node.targets[0])
    return ast.unparse(call)[:60]


def _edit(source: str, pick: Callable[[ast.Module], ast.AST | None], apply: Callable[[ast.Module, ast.AST], None]
          ) -> str | None:
    tree = ast.parse(source)
    node = pick(tree)
    if node is None:
        return None
    apply(tree, node)
    ast.fix_missing_locations(tree)
    try:
        return ast.unparse(tree) + "\n"
    except (ValueError, AttributeError, RecursionError):
        return None


def _nth(kind: Callable[[ast.AST], bool], index: int) -> Callable[[ast.Module], ast.AST | None]:
    def pick(tree: ast.Module) -> ast.AST | None:
        found = [n for n in ast.walk(tree) if kind(n)]
        return found[index] if index < len(found) else None
    return pick


def _nth_removable(index: int) -> Callable[[ast.Module], ast.AST | None]:
    def pick(tree: ast.Module) -> ast.AST | None:
        found = _removable(tree)
        return found[index] if index < len(found) else None
    return pick


def _is_inplace(node: ast.AST) -> bool:
    name = _call_name(node)
    return (name is not None and name.endswith("_") and not name.startswith("_") and len(name) > 1
            and name not in NOT_INPLACE)


def _grad_kw(node: ast.AST) -> ast.keyword | None:
    if _call_name(node) in FACTORIES:
        assert isinstance(node, ast.Call)
        return next((k for k in node.keywords if k.arg == "requires_grad"), None)
    return None


def _requires_grad_on(node: ast.AST) -> bool:
    kw = _grad_kw(node)
    return (kw is not None and not (isinstance(kw.value, ast.Constant) and kw.value.value is False)) or (
        _call_name(node) == "requires_grad_")


def _float_factory(node: ast.AST) -> bool:
    return (_call_name(node) in FLOAT_FACTORIES and isinstance(node, ast.Call)
            and not any(k.arg == "dtype" for k in node.keywords))


def _removable(tree: ast.Module) -> list[ast.stmt]:
    """Statements inside functions and under `if __name__ == "__main__"` that are not the last of their body,
    nor definitions, imports, returns or a bare constant (a docstring: without it, nothing runs differently):
    removing one keeps the program runnable more often than not."""
    out: list[ast.stmt] = []
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if node is tree or not isinstance(body, list):
            continue
        for stmt in body[:-1]:
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
                                     ast.Return, ast.If, ast.For, ast.While, ast.With, ast.Try)) \
                    and not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                out.append(stmt)
    return out


def generate(source: str, limit: int = MAX_VARIANTS) -> list[Variant]:
    """The repro's near-miss variants, at most `limit`, taken round-robin over KIND_ORDER so that each kind
    gets its first edits in before any gets its later ones. None when the source does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    by_kind: dict[VariantKind, list[Variant]] = {kind: [] for kind in KIND_ORDER}
    nodes = list(ast.walk(tree))

    def add(kind: VariantKind, change: str, line: int, new: str | None) -> None:
        if new is not None and new != source:
            by_kind[kind].append(Variant(f"{kind}-{len(by_kind[kind]) + 1}", kind, change, line, new))

    for i, node in enumerate([n for n in nodes if _is_inplace(n)]):
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        name = node.func.attr
        add("out_of_place", f"`{name[:-1]}` instead of `{name}` (line {node.lineno})", node.lineno,
            _edit(source, _nth(_is_inplace, i), _out_of_place))
    for i, node in enumerate([n for n in nodes if _requires_grad_on(n)]):
        assert isinstance(node, ast.Call)
        who = _target(tree, node)
        add("no_requires_grad", f"`{who}` does not require grad (line {node.lineno})", node.lineno,
            _edit(source, _nth(_requires_grad_on, i), _no_grad))
    for i, node in enumerate([n for n in nodes if _float_factory(n)]):
        assert isinstance(node, ast.Call)
        who = _target(tree, node)
        add("float64", f"`{who}` is float64 (line {node.lineno})", node.lineno,
            _edit(source, _nth(_float_factory, i), _float64))
    for i, stmt in enumerate(_removable(tree)):
        text = ast.unparse(stmt).splitlines()[0][:80]
        add("statement_removed", f"without line {stmt.lineno}: `{text}`", stmt.lineno,
            _edit(source, _nth_removable(i), _remove))
    out: list[Variant] = []
    queues = [list(by_kind[kind]) for kind in KIND_ORDER]
    while len(out) < limit and any(queues):
        for queue in queues:
            if queue and len(out) < limit:
                out.append(queue.pop(0))
    return out


def _out_of_place(tree: ast.Module, node: ast.AST) -> None:
    """`x.add_(y)` as a statement becomes `x = x.add(y)`; elsewhere the call itself becomes `x.add(y)`."""
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    receiver = node.func.value
    node.func.attr = node.func.attr[:-1]
    for parent in ast.walk(tree):
        for _name, value in ast.iter_fields(parent):
            if not isinstance(value, list):
                continue
            for j, stmt in enumerate(value):
                if isinstance(stmt, ast.Expr) and stmt.value is node and isinstance(receiver, (ast.Name,
                                                                                              ast.Attribute)):
                    target = copy.deepcopy(receiver)
                    target.ctx = ast.Store()
                    value[j] = ast.copy_location(ast.Assign(targets=[target], value=node), stmt)
                    return


def _no_grad(tree: ast.Module, node: ast.AST) -> None:
    assert isinstance(node, ast.Call)
    if _call_name(node) == "requires_grad_":
        node.args, node.keywords = [ast.Constant(False)], []
        return
    for kw in node.keywords:
        if kw.arg == "requires_grad":
            kw.value = ast.Constant(False)


def _float64(tree: ast.Module, node: ast.AST) -> None:
    assert isinstance(node, ast.Call)
    node.keywords.append(ast.keyword(arg="dtype", value=ast.Attribute(ast.Name("torch", ast.Load()), "float64",
                                                                      ast.Load())))


def _remove(tree: ast.Module, node: ast.AST) -> None:
    for parent in ast.walk(tree):
        body = getattr(parent, "body", None)
        if isinstance(body, list) and node in body:
            body[body.index(node)] = ast.copy_location(ast.Pass(), node)
            return


# --------------------------------------------------------------------------------------------
# running them


@dataclass
class VariantRun:
    outcome: VariantOutcome
    spectrum: Spectrum | None


def read_spectrum(path: Path, run_id: str, failed: bool, label: str) -> Spectrum | None:
    """The spectrum probe's file, or None when the run left none (killed, or coverage missing)."""
    try:
        data = json.loads(path.read_text())
        lines = {str(f): frozenset(int(n) for n in ns) for f, ns in dict(data["lines"]).items()}
        root = str(data["torch"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Spectrum(run_id=run_id, failed=failed, lines=lines, label=label, root=root)


async def run_variants(
    store: Store, case: CaseRecord, ref_failure, ref_env: dict[str, str], ref_args: list[str], script: Path, *,
    launcher: Path, backend: str | None, timeout_s: float, limiter: anyio.CapacityLimiter, progress: ProgressFn,
    budget_s: float = DEFAULT_BUDGET_S, limit: int = MAX_VARIANTS, near_misses: Sequence[Path] = (),
    generated: bool = True,
) -> list[VariantRun]:
    """Each variant run once (with `backend` forced through the launcher), with its spectrum, within the
    limiter; once budget_s has passed, variants not yet started are not run. The agent's near misses (copies
    of the repro it changed in one way) run first, whatever the budget; `generated`: the generated ones too."""
    variants = [Variant(f"near_miss-{i}", "near_miss", f"`{path.name}`", 0, path.read_text(errors="replace"))
                for i, path in enumerate(near_misses, 1)]
    variants += generate(script.read_text(errors="replace"), limit) if generated else []
    if not variants:
        return []
    folder = store.case_dir(case.case_id) / "variants"
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + budget_s
    done: list[VariantRun] = []
    await progress(f"localize: {len(variants)} near-miss variant(s) of the repro")

    async def one(index: int, variant: Variant) -> None:
        async with limiter:
            if time.monotonic() > deadline and index >= MIN_VARIANTS + len(near_misses):
                return
            path = folder / f"{script.stem}_{variant.id}.py"
            path.write_text(variant.source)
            out = folder / f"{variant.id}-{time.monotonic_ns()}.json"
            argv = [case.python, str(launcher), *(["--backend", backend] if backend else []), "--", str(path),
                    *ref_args]
            result = await execute(store, case, with_spectrum(store, argv, out), tool="localize", cwd=script.parent,
                                   env_add=ref_env, timeout_s=timeout_s if index < MIN_VARIANTS + len(near_misses) else
                                   min(timeout_s, max(1.0, deadline - time.monotonic())),
                                   progress=progress, warm=WarmRequest(), label=f"localize variant {variant.id}")
            verdict = run_failure(result)
            match = same_failure(verdict, ref_failure, RERUN_OR_ACCURACY).level
            outcome: Outcome = ("timeout" if verdict.timed_out else "same failure" if match else
                                "different failure" if verdict.failed else "passes")
            if outcome == "same failure" and variant.kind in CAN_BREAK_THE_PROGRAM:  # because of the compiler?
                plain = await execute(store, case, argv, tool="localize", cwd=script.parent,
                                      env_add={**ref_env, **UNCOMPILED_ENV}, timeout_s=timeout_s, progress=progress,
                                      warm=WarmRequest(), label=f"localize variant {variant.id}, compilation off")
                if same_failure(run_failure(plain), ref_failure, RERUN_OR_ACCURACY).level:
                    outcome = "fails uncompiled too"
        spectrum = (read_spectrum(out, result.run_id, outcome == "same failure", variant.change)
                    if outcome in ("same failure", "passes") else None)
        done.append(VariantRun(VariantOutcome(id=variant.id, kind=variant.kind, change=variant.change,
                                              line=variant.line, outcome=outcome, run_id=result.run_id), spectrum))
        await progress(f"localize: variant {variant.id} ({variant.change}): {outcome}")

    async with anyio.create_task_group() as group:
        for index, variant in enumerate(variants):
            group.start_soon(one, index, variant)
    order = {v.id: i for i, v in enumerate(variants)}
    return sorted(done, key=lambda r: order[r.outcome.id])


def circumstances(outcomes: list[VariantOutcome]) -> list[str]:
    """The variants that changed the outcome, in words: what the failure needs."""
    return [f"passes {PHRASE[o.kind]}{o.change}" for o in outcomes if o.outcome == "passes"]


PHRASE: dict[VariantKind, str] = {"out_of_place": "with ", "no_requires_grad": "when ", "float64": "when ",
                                  "statement_removed": "", "near_miss": "as your near miss "}
