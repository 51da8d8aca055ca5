"""The source-level reducer: shrink the repro script itself while it still fails the case's way.

Phases, each under the same predicate (the candidate, run as a script, fails with the case's
failure by the case's oracle, `analysis.compare.Oracle` with the CANDIDATE rules: at 'signature' or
'exception' level, after a compiled call; for an accuracy case that passed with compilation off,
a candidate that matches is run once more with compilation off and must not fail that way there):

1. statements — delta debugging over every statement list (module, class and function bodies,
   `if __name__ == "__main__":` ...), outermost first; the removal candidates of one granularity
   are evaluated in parallel windows and the first that still fails (in order) is taken, so the
   result does not depend on timing. Before it and after each statement list, one candidate
   drops all dead code at once (imports, functions, classes and assignments whose names nothing
   reads, and bare string statements), repeated until nothing more is dead: what a removal
   deep in the script made unused goes without another pass over the outer lists (`self.x = ...`
   counts as dead when no `.x` is read anywhere);
   then helpers whose body is one `return EXPR` are put in where they are called, one at a time;
2. pysource-minimize — the library's own fine-grained pass (expressions, arguments, names), whose
   checker calls back into the same cached, budgeted predicate;
3. constants — integer literals (tensor shapes, sizes, counts) are tried at 1, 2 and half their
   value, several at once.

Every evaluation is cached by candidate content; a candidate that runs much longer than the
original is killed; the time budget stops all phases and the best (smallest confirmed) source
so far is the result.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread

from pt2_bug_basher.analysis.compare import CANDIDATE, Rules
from pt2_bug_basher.analysis.suspects import callee_name
from pt2_bug_basher.execution.repro import COMPILE_OFF_ENV
from pt2_bug_basher.execution.runs import ProgressFn
from pt2_bug_basher.reduce.evaluate import Evaluator
from pt2_bug_basher.reduce.ladder import Reference
from pt2_bug_basher.reduce.minimal import count_statements

PROGRESS_EVERY_S = 10.0
_COMPILE_MARKERS = ("compile(", "optimize(", "export(", "_dynamo", "aot_")
# torch.compile's arguments that choose what runs: a candidate that drops or changes one tests another compiler
_COMPILER_KEYWORDS = ("backend", "mode", "fullgraph", "dynamic", "options")


# factories whose positional ints (or first tuple) are a tensor's sizes
_SHAPED_FACTORIES = frozenset({"randn", "rand", "ones", "zeros", "empty", "full"})


def specialised_dims(source: str) -> int:
    """Sizes of 0 or 1 the script gives its tensors: Dynamo specialises on them (and a size of 0 empties the
    tensor), so a candidate with more of them than the repro runs other code than the bug's."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return 0
    count = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = callee_name(node.func)
        if name not in _SHAPED_FACTORIES:
            continue
        first = node.args[0]
        sizes = first.elts if isinstance(first, (ast.Tuple, ast.List)) else ([] if name == "full" else node.args)
        count += sum(1 for s in sizes if isinstance(s, ast.Constant) and type(s.value) is int and s.value in (0, 1))
    return count


def compiler_settings(source: str) -> frozenset[str]:
    """`backend='eager'` and the like, as the script passes them to torch.compile (or optimize) calls."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = callee_name(node.func)
            if name in ("compile", "optimize"):
                found |= {f"{k.arg}={ast.unparse(k.value)}" for k in node.keywords if k.arg in _COMPILER_KEYWORDS}
    return frozenset(found)


@dataclass
class ReducerStats:
    evaluations: int = 0
    cache_hits: int = 0
    static_rejects: int = 0
    off_runs: int = 0
    eval_seconds: float = 0.0
    interesting: int = 0
    budget_exhausted: bool = False
    matches: dict[str, int] = field(default_factory=dict)
    phases: list[str] = field(default_factory=list)


def _digest(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()[:16]


def _compiles(source: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<candidate>", "exec")
        return True
    except (SyntaxError, ValueError):
        return False


def normalise_source(source: str) -> str:
    """The script round-tripped through ast (what every candidate looks like)."""
    return ast.unparse(ast.parse(source)) + "\n"


class SourceReducer:
    def __init__(self, ref: Reference, evaluator: Evaluator, work_dir: Path, *, cwd: Path, name: str,
                 timeout_s: float, deadline: float, progress: ProgressFn, static_filter: bool = True,
                 rules: Rules = CANDIDATE) -> None:
        self.ref = ref
        self.evaluator = evaluator
        self.work_dir = work_dir
        self.cwd = cwd
        self.name = name
        self.timeout_s = timeout_s
        self.deadline = deadline
        self.progress = progress
        self.cache: dict[str, bool] = {}
        self.stats = ReducerStats()
        self.best: str | None = None
        self.best_match: str | None = None
        self._limiter = anyio.CapacityLimiter(max(1, evaluator.parallel))
        self._last_report = time.monotonic()
        self._phase = "start"
        self._markers = [m for m in _COMPILE_MARKERS if m in ref.script.read_text(errors="replace")] \
            if static_filter and ref.script.exists() else []
        self._static_filter = static_filter
        self._settings: frozenset[str] = frozenset()  # the compiler settings of the source being reduced
        self._specialised = 0  # its sizes of 0 or 1
        self._extra_path = [str(ref.script.parent)]
        self.oracle = ref.oracle(rules, work_dir / name)
        # accuracy: an assertion may fail whatever the values are; only the compile-off run tells
        self._off_each = ref.off_passes and ref.category == "accuracy"

    # -- the predicate ---------------------------------------------------------------

    def out_of_budget(self) -> bool:
        if time.monotonic() >= self.deadline:
            self.stats.budget_exhausted = True
            return True
        return False

    async def interesting(self, source: str) -> bool:
        key = _digest(source)
        if key in self.cache:
            self.stats.cache_hits += 1
            return self.cache[key]
        if self._markers and not any(m in source for m in self._markers):
            # it no longer reaches the compiler at all: cannot fail the case's way
            self.stats.static_rejects += 1
            self.cache[key] = False
            return False
        if self._settings and not self._settings <= compiler_settings(source):
            # backend="eager" dropped: Inductor would run instead, a heavier repro of another setup
            self.stats.static_rejects += 1
            self.cache[key] = False
            return False
        if self._static_filter and specialised_dims(source) > self._specialised:
            # a size shrunk to 0 or 1: Dynamo specialises it, another path than the bug's (an agent's repro
            # drifted to randn(0, 1), where the wrong value became 0/0)
            self.stats.static_rejects += 1
            self.cache[key] = False
            return False
        if not _compiles(source):
            self.cache[key] = False
            return False
        if self.out_of_budget():
            return False
        async with self._limiter:
            if self.out_of_budget():
                return False
            cand_dir = self.work_dir / "candidates" / key
            cand_dir.mkdir(parents=True, exist_ok=True)
            script = cand_dir / self.name  # same file name: the signature names the user's file
            script.write_text(source)
            started = time.monotonic()
            # a candidate started near the deadline is stopped there, not at its full timeout: the time
            # after the deadline is the fresh confirming run's
            timeout_s = min(self.timeout_s, max(1.0, self.deadline - started))
            result = await self.evaluator.run(script, self.ref.args, cwd=self.cwd, out_dir=cand_dir,
                                              timeout_s=timeout_s, extra_path=self._extra_path)
            judged = self.oracle.judge(result)
            if judged.matches and self._off_each and not result.outcome.timed_out:
                off = await self.evaluator.run(script, self.ref.args, cwd=self.cwd, out_dir=cand_dir / "off",
                                               timeout_s=timeout_s, extra_path=self._extra_path,
                                               env=COMPILE_OFF_ENV)
                judged = self.oracle.confirm(result, off)
                self.stats.off_runs += 1
            self.stats.eval_seconds += time.monotonic() - started
            self.stats.evaluations += 1
        if result.outcome.timed_out and timeout_s < self.timeout_s:
            self.stats.budget_exhausted = True  # cut by the budget: neither interesting nor known not to be
            return False
        match = judged.level
        ok = judged.matches
        self.cache[key] = ok
        if ok:
            self.stats.interesting += 1
            self.stats.matches[str(match)] = self.stats.matches.get(str(match), 0) + 1
            if self.best is None or len(source) < len(self.best):
                self.best, self.best_match = source, match
        await self._maybe_report()
        return ok

    async def _maybe_report(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_report >= PROGRESS_EVERY_S:
            self._last_report = now
            size = len(self.best.splitlines()) if self.best else None
            await self.progress(
                f"source reducer ({self._phase}): {self.stats.evaluations} candidates run, "
                f"{self.stats.cache_hits} cached, current size {size} lines")

    async def first_interesting(self, sources: list[str]) -> int | None:
        """Index of the first source (in order) that is interesting; evaluated in parallel windows."""
        window = max(1, self.evaluator.parallel)
        for start in range(0, len(sources), window):
            if self.out_of_budget():
                return None
            chunk = sources[start:start + window]
            results: list[bool] = [False] * len(chunk)

            async def one(i: int, src: str, into: list[bool] = results) -> None:
                into[i] = await self.interesting(src)

            async with anyio.create_task_group() as group:
                for i, src in enumerate(chunk):
                    group.start_soon(one, i, src)
            for i, ok in enumerate(results):
                if ok:
                    return start + i
        return None

    # -- phases ------------------------------------------------------------------------

    async def run(self, source: str, *, use_library: bool = True, shrink_constants: bool = True) -> str | None:
        """Reduce source; returns the smallest interesting source (None if the start is not; the start
        itself when the budget ran out before any candidate ran)."""
        start = normalise_source(source)
        self._settings = compiler_settings(start) if self._static_filter else frozenset()
        self._specialised = specialised_dims(start)
        self._phase = "checking the original"
        if not await self.interesting(start):
            if self.stats.budget_exhausted and _digest(start) not in self.cache:
                return start  # the budget ran out before the original was judged: it stands, unreduced
            if not await self.interesting(source):
                return None
            start = source
        current = start
        self._phase = "statements"
        self.stats.phases.append("statements")
        current = await self.remove_statements(current)
        if not self.out_of_budget():
            self._phase = "inlining"
            self.stats.phases.append("inlining")
            current = await self.inline_calls(current)
        if use_library and not self.out_of_budget():
            self._phase = "pysource-minimize"
            self.stats.phases.append("pysource-minimize")
            current = await self.library_pass(current)
        if shrink_constants and not self.out_of_budget():
            self._phase = "constants"
            self.stats.phases.append("constants")
            current = await self.shrink_constants(current)
        if not self.out_of_budget() and use_library and current != start:
            # one more statement pass: constants may have made statements removable
            self._phase = "statements (again)"
            current = await self.remove_statements(current)
        await self._maybe_report(force=True)
        return self.best if self.best is not None and len(self.best) <= len(current) else current

    async def remove_statements(self, source: str) -> str:
        current = await self.remove_dead_code(source)
        k = 0
        while not self.out_of_budget():
            bodies = _bodies(ast.parse(current))
            if k >= len(bodies):
                break
            reduced = await self._ddmin_body(current, k)
            if reduced != current:
                before = len(_bodies(ast.parse(reduced)))
                reduced = await self.remove_dead_code(reduced)
                # lists that went with the dead code may have come before this one: step back as many
                # (a list done twice costs time, a list skipped would cost size)
                k = max(-1, k - (before - len(_bodies(ast.parse(reduced)))))
            current = reduced
            k += 1
        return current

    async def inline_calls(self, source: str) -> str:
        """One-expression helpers put in where they are called, one helper at a time, until none helps."""
        current = source
        while not self.out_of_budget():
            hit = await self.first_interesting(candidates := inlined_calls(current))
            if hit is None:
                break
            current = candidates[hit]
        return current

    async def remove_dead_code(self, source: str) -> str:
        candidate = without_dead_code(source)
        if candidate is None or self.out_of_budget():
            return source
        return candidate if await self.interesting(candidate) else source

    async def _ddmin_body(self, source: str, k: int) -> str:
        current = source
        n = len(_bodies(ast.parse(current))[k][1])
        chunk = max(1, n // 2)
        while chunk >= 1 and not self.out_of_budget():
            n = len(_bodies(ast.parse(current))[k][1])
            if n == 0 or (n == 1 and _is_pass(_bodies(ast.parse(current))[k][1][0])):
                break
            candidates = []
            for i in range(0, n, chunk):
                cand = _without(current, k, i, min(n, i + chunk))
                if cand is not None and cand != current:
                    candidates.append(cand)
            hit = await self.first_interesting(candidates)
            if hit is not None:
                current = candidates[hit]
                continue  # same granularity on the smaller body
            if chunk == 1:
                break
            chunk = max(1, chunk // 2)
        return current

    async def library_pass(self, source: str) -> str:
        from pysource_minimize import StopMinimization, minimize

        def checker(candidate: str) -> bool:
            if self.out_of_budget():
                raise StopMinimization
            return anyio.from_thread.run(self.interesting, candidate)

        before_best = self.best
        try:
            result = await anyio.to_thread.run_sync(lambda: minimize(source, checker, retries=0),
                                                    abandon_on_cancel=True)
        except Exception:  # noqa: BLE001 - CouldNotMinimize and friends: keep what we have
            result = source
        if self.stats.budget_exhausted:
            # StopMinimization makes the library accept an unchecked candidate: use the best checked one
            return self.best or before_best or source
        if not await self.interesting(result):
            return self.best or source
        return result

    async def shrink_constants(self, source: str) -> str:
        current = source
        index = 0
        while not self.out_of_budget():
            consts = _int_constants(ast.parse(current))
            if index >= len(consts):
                break
            value = consts[index]
            options = sorted({v for v in (1, 2, value // 2) if 0 < v < value})
            tried = [(v, c) for v, c in ((v, _with_constant(current, index, v)) for v in options) if c is not None]
            hit = await self.first_interesting([c for _, c in tried])
            if hit is not None:
                current = tried[hit][1]
                if tried[hit][0] < 2:
                    continue  # it left the list of constants >= 2: the next one has this index now
            index += 1
        return current


# -- AST helpers ------------------------------------------------------------------------


def _bodies(tree: ast.AST) -> list[tuple[ast.AST, list[ast.stmt]]]:
    """Every statement list in pre-order (outermost first)."""
    found: list[tuple[ast.AST, list[ast.stmt]]] = []

    def visit(node: ast.AST) -> None:
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, name, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                found.append((node, stmts))
        for handler in getattr(node, "handlers", []) or []:
            found.append((handler, handler.body))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.stmt, ast.excepthandler)):
                visit(child)

    visit(tree)
    return found


def without_dead_code(source: str) -> str | None:
    """The source without what nothing reads: imports, functions, classes and plain-name assignments
    whose names are never loaded, and bare string statements, repeated until none is left (class
    bodies are kept whole: their methods are reached by attribute). None when nothing is dead."""
    tree = ast.parse(source)
    changed = False
    while True:
        loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}
        loaded |= {f".{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                   and not isinstance(n.ctx, ast.Store)}
        removed = False
        for owner, stmts in _bodies(tree):
            if isinstance(owner, ast.ClassDef):
                continue
            kept: list[ast.stmt] = []
            for stmt in stmts:
                live = _live_part(stmt, loaded)
                if live is None:
                    removed = True
                    continue
                kept.append(live)
            if not kept:
                kept.append(ast.Pass())
            stmts[:] = kept
        if not removed:
            break
        changed = True
    return ast.unparse(tree) + "\n" if changed else None


def _live_part(stmt: ast.stmt, loaded: set[str]) -> ast.stmt | None:
    """stmt, or the part of it whose names something reads; None when all of it is dead."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
        return None
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        if any(alias.name == "*" for alias in stmt.names):
            return stmt
        used = [alias for alias in stmt.names if (alias.asname or alias.name.split(".")[0]) in loaded]
        if not used:
            return None
        if len(used) != len(stmt.names):
            stmt.names = used
        return stmt
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return stmt if stmt.name in loaded else None
    if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
        return stmt if any(t.id in loaded for t in stmt.targets if isinstance(t, ast.Name)) else None
    if isinstance(stmt, ast.Assign) and all(_self_attribute(t) for t in stmt.targets):
        return stmt if any(f".{t.attr}" in loaded for t in stmt.targets if isinstance(t, ast.Attribute)) else None
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return stmt if stmt.target.id in loaded else None
    return stmt


def _self_attribute(target: ast.expr) -> bool:
    return isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"


def inlined_calls(source: str) -> list[str]:
    """Candidates that each replace the calls of one module-level function whose body is a single
    `return EXPR` by EXPR with the arguments put in for the parameters (plain positional or keyword
    parameters, arguments without starred parts), the function then dropped when nothing else reads it."""
    tree = ast.parse(source)
    candidates: list[str] = []
    for fn in [s for s in tree.body if isinstance(s, ast.FunctionDef)]:
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        args = fn.args
        if fn.decorator_list or len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None \
                or args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            continue
        candidate = _inline(source, fn.name, [a.arg for a in args.args])
        if candidate is not None:
            candidates.append(candidate)
    return candidates


def _inline(source: str, name: str, params: list[str]) -> str | None:
    tree = ast.parse(source)
    fn = next(s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == name)
    returned = fn.body[-1].value  # type: ignore[attr-defined]

    class Inline(ast.NodeTransformer):
        count = 0

        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            if not (isinstance(node.func, ast.Name) and node.func.id == name):
                return node
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                return node
            if len(node.args) > len(params):
                return node
            bound = dict(zip(params[:len(node.args)], node.args, strict=True))
            bound.update({k.arg: k.value for k in node.keywords if k.arg is not None})
            if set(bound) != set(params):
                return node
            self.count += 1
            return _Substitute(bound).visit(copy.deepcopy(returned))

    inliner = Inline()
    tree = inliner.visit(tree)
    if not inliner.count:
        return None
    text = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    return without_dead_code(text) or text


class _Substitute(ast.NodeTransformer):
    def __init__(self, bound: dict[str, ast.expr]) -> None:
        self.bound = bound

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and node.id in self.bound:
            return copy.deepcopy(self.bound[node.id])
        return node


def _is_pass(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Pass)


def _without(source: str, k: int, start: int, end: int) -> str | None:
    tree = ast.parse(source)
    bodies = _bodies(tree)
    if k >= len(bodies):
        return None
    stmts = bodies[k][1]
    del stmts[start:end]
    if not stmts:
        stmts.append(ast.Pass())
    try:
        return ast.unparse(tree) + "\n"
    except Exception:  # noqa: BLE001
        return None


def _int_constants(tree: ast.AST) -> list[int]:
    return [n.value for n in _int_constant_nodes(tree) if isinstance(n.value, int)]


def _int_constant_nodes(tree: ast.AST) -> list[ast.Constant]:
    return [n for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and type(n.value) is int and n.value >= 2]


def _with_constant(source: str, index: int, value: int) -> str | None:
    tree = ast.parse(source)
    nodes = _int_constant_nodes(tree)
    if index >= len(nodes):
        return None
    nodes[index].value = value
    return ast.unparse(tree) + "\n"


def size_of(source: str) -> dict[str, int]:
    """Lines, bytes and statements, counted as minimal.judge counts them (imports, `pass` and docstrings left
    out), so that every answer gives one count for one script."""
    try:
        statements = count_statements(ast.parse(source))
    except (SyntaxError, ValueError):
        statements = -1
    return {"lines": len([ln for ln in source.splitlines() if ln.strip()]), "bytes": len(source.encode()),
            "statements": statements}
