"""Suspects: places in torch's source that may hold the bug, most likely first.

From a bisection (the function that implements the guilty lowering, decomposition or pass, then
the helpers only it uses, found by reading its module with `ast`, then for a lowering the code
generation that only its kernels ran), from a config switch that fixes
the failure (the knob), and from an exception raised inside torch (the innermost torch frames that
are not compile plumbing, and before them, when the exception used a None, the function whose call
gave it).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from pt2_bug_basher.analysis.failure import Frame, innermost_function, parse
from pt2_bug_basher.analysis.spectra import FunctionSpan, RankedFunction, function_spans, tree_function_spans
from pt2_bug_basher.domain.bisection import BisectReport, SourceSite
from pt2_bug_basher.domain.evidence import LineRange, Suspect, SuspectEvidence

MAX_HELPERS = 3
MAX_FRAMES = 3
# code generation that ran only with the culprit, code emitters first: a single-op graph runs every generic helper
# only with its op lowered, so a sentence names the first few; the suspects and bisection.codegen keep them all
MAX_CODEGEN_NAMED = 3
HELPER_USERS_LIMIT = 3
# Frames that only pass a call through: the entry points, wrappers and dispatch of the compile stack.
PLUMBING_FILES = re.compile(
    r"torch/_dynamo/(eval_frame|convert_frame|external_utils|exc|repro/[^/]+|backends/[^/]+)\.py$"
    r"|torch/_inductor/(compile_fx|standalone_compile)\.py$|torch/_utils_internal\.py$|torch/_compile\.py$"
    r"|torch/nn/modules/module\.py$|torch/utils/_contextlib\.py$|torch/_dynamo/output_graph\.py$"
    r"|torch/testing/"
)
PLUMBING_FUNCTIONS = re.compile(
    r"^(_fn|fn|inner|wrapper|wrapped|_wrapped_call_impl|_call_impl|__call__|call_user_compiler|"
    r"_call_user_compiler|time_wrapper|dynamo_timed|debug_wrapper|compile_inner|_compile|run_node|"
    r"step|run|inline_call_|call_function|call_method|"
    r"_wrap_graph_break_with_torch_runtime_err)$"  # Dynamo re-raising a fake-tensor failure as a graph break
)


def relative_torch_path(path: str) -> str:
    cut = path.replace("\\", "/").rfind("/torch/")
    return path[cut + 1:] if cut >= 0 else path


def bisect_suspects(report: BisectReport) -> list[Suspect]:
    if report.config is not None:
        return [Suspect(file=report.config.file, line=report.config.line, function=report.config.function,
                        why=report.meaning, evidence=["config"])]
    culprit = report.culprit
    if culprit is None:
        return []
    what = f"{report.subsystem} #{report.bisect_number}: {culprit.subject or culprit.debug}"
    out: list[Suspect] = []
    for site in culprit.sites:
        kind = "generates the code for" if "Overrides." in site.function else "implements"
        out.append(Suspect(file=site.file, line=site.line, function=site.function,
                           why=f"{kind} {what}, the application the bisection isolated", evidence=["bisection"]))
    if culprit.sites and "<locals>" not in culprit.sites[-1].function:  # a factory's closure: its helpers are generic
        out += _helpers(culprit.sites[-1], what, culprit.helpers_called)
    subject = culprit.subject or culprit.debug
    for call in report.codegen:
        out.append(Suspect(file=call.file, line=call.line, function=call.function, why=(
            f"generates kernel code for {subject}: ran only with it lowered ({call.calls} call(s) in the failing "
            "trial), never when it fell back to ATen" + ("; returns code text" if call.emits else "")),
            evidence=["codegen"]))
    return _unique(out)


def codegen_summary(report: BisectReport) -> str:
    """A sentence naming every code-generation suspect, so a reader of `meaning` alone sees them too."""
    if not report.codegen:
        return ""
    subject = (report.culprit.subject or report.culprit.debug) if report.culprit else "the culprit"
    named = ", ".join(f"{c.function} ({c.file}:{c.line})" for c in report.codegen[:MAX_CODEGEN_NAMED])
    more = len(report.codegen) - MAX_CODEGEN_NAMED
    return (f" The bug may be in the code generated for {subject} rather than in its lowering: these ran only "
            f"with it lowered: {named}" + (f", and {more} more (the suspects list them)" if more > 0 else "") + ".")


def helper_candidates(site: SourceSite) -> list[str]:
    """Module-level functions of site's module that its function refers to and few others use."""
    found = _module_helpers(site)
    if found is None:
        return []
    _, names, users = found
    return [name for name in names if users[name] <= HELPER_USERS_LIMIT]


def module_name(site: SourceSite) -> str:
    return site.file.removesuffix(".py").replace("/", ".")


def _module_helpers(site: SourceSite) -> tuple[ast.FunctionDef, list[str], Counter[str]] | None:
    try:
        tree = ast.parse(Path(site.abs).read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    top = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    target = next((n for n in top.values() if _first_line(n) <= site.line <= (n.end_lineno or n.lineno)), None)
    if target is None:
        return None
    users: Counter[str] = Counter()
    for node in top.values():
        for name in {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in top and n.id != node.name}:
            users[name] += 1
    called = [n.id for n in ast.walk(target) if isinstance(n, ast.Name) and n.id in top and n.id != target.name]
    return target, list(dict.fromkeys(called)), users


def _helpers(site: SourceSite, what: str, calls: dict[str, int] | None) -> list[Suspect]:
    """The implementing function's specific helpers (few other users); when a failing run counted their
    calls, only those that ran, most specific first."""
    found = _module_helpers(site)
    if found is None:
        return []
    target, names, users = found
    names = [n for n in names if users[n] <= HELPER_USERS_LIMIT and (calls is None or calls.get(n, 0) > 0)]
    ranked = sorted(names, key=lambda name: (users[name], names.index(name)))[:MAX_HELPERS]
    defs = {node.name: node for node in ast.parse(Path(site.abs).read_text()).body if isinstance(node, ast.FunctionDef)}
    out: list[Suspect] = []
    for name in ranked:
        others = users[name] - 1
        ran = f"; the failing run called it {calls[name]} time(s)" if calls else ""
        out.append(Suspect(file=site.file, line=_first_line(defs[name]), function=name,
                           why=f"called by {target.name} (which {what.split(':')[0]} runs){ran}"
                               + (f"; used by {others} other function(s) of its module" if others else
                                  "; used by no other function of its module"), evidence=["helper"]))
    return out


MAX_FUNCTION_LINES = 400


def enclosing_function(source: str | list[FunctionSpan], line: int) -> tuple[int, int]:
    """The lines of the innermost function that holds `line` (in source, or in its function_spans); the line
    alone when none does, or the function is longer than MAX_FUNCTION_LINES."""
    spans = function_spans(source) if isinstance(source, str) else source
    holding = [(s.first, s.last) for s in spans if s.first <= line <= s.last]
    if not holding:
        return line, line
    first, last = min(holding, key=lambda span: span[1] - span[0])
    return (first, last) if last - first < MAX_FUNCTION_LINES else (line, line)


def _first_line(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Where inspect says a function starts: its first decorator."""
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


# an exception that used a None: the bug is more often in what returned it than in what used it
NONE_USED = re.compile(r"\bNoneType\b")


def callee_name(node: ast.expr) -> str | None:
    """The name a call's function expression ends in: `compile` for `torch.compile` and for `compile`."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _called_result(scope: ast.AST, line: int) -> ast.expr | None:
    """`@factory(arg)` or `factory(arg)(x)` on the line: the factory whose result was called."""
    for node in ast.walk(scope):
        called = [*getattr(node, "decorator_list", []), *([node.func] if isinstance(node, ast.Call) else [])]
        for call in called:
            if isinstance(call, ast.Call) and call.lineno == line:
                return call.func
    return None


def _produced_by(fn: ast.AST, line: int, message: str) -> ast.expr | None:
    """What was called (`f`, `self.f`) to give the frame's line its None: the factory whose result it called,
    the call the line itself unpacks, or (in a function) the last call assigned, before the line, to a name
    the line reads."""
    if "not callable" in message:
        return _called_result(fn, line)
    here = [n for n in ast.walk(fn) if isinstance(n, ast.stmt) and n.lineno <= line <= (n.end_lineno or n.lineno)]
    stmt = min(here, key=lambda n: (n.end_lineno or n.lineno) - n.lineno, default=None)
    if stmt is None:
        return None
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and stmt.lineno == line \
            and isinstance(stmt.targets[0], (ast.Tuple, ast.List)):
        return stmt.value.func  # `a, b = f(...)`: f's None could not be unpacked
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None  # module level: what a name was bound to earlier is another statement's business
    read = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    best: ast.Assign | ast.AnnAssign | None = None
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.lineno < stmt.lineno \
                and _producing_call(node.value) is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
            if names & read and (best is None or node.lineno > best.lineno):
                best = node
    call = _producing_call(best.value) if best is not None else None
    return call.func if call is not None else None


def _producing_call(value: ast.expr | None) -> ast.Call | None:
    """The call whose results a value holds: `f(...)`, or the element of `[f(a) for a in xs]` (its items)."""
    if isinstance(value, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        value = value.elt
    return value if isinstance(value, ast.Call) else None


def _enclosing_definition(tree: ast.AST, line: int, name: str) -> tuple[int, str] | None:
    """A function named `name` defined inside a function that holds the line (a closure the line can call),
    the innermost such scope first: its first line and qualified name (outer.<locals>.name)."""
    spans = tree_function_spans(tree)
    holding = {s.qualname: s for s in spans if s.first <= line <= s.last}
    found = [(holding[parent], s) for s in spans if ".<locals>." in s.qualname
             and s.qualname.rsplit(".<locals>.", 1)[1] == name
             and (parent := s.qualname.rsplit(".<locals>.", 1)[0]) in holding]
    if not found:
        return None
    _, span = min(found, key=lambda pair: pair[0].last - pair[0].first)
    return span.first, span.qualname


def _module_file(torch_root: Path, here: Path, module: str | None, level: int) -> Path | None:
    if level:
        base = here.parent
        for _ in range(level - 1):
            base = base.parent
        parts = [str(base), *(module.split(".") if module else [])]
    elif module and (module == "torch" or module.startswith("torch.")):
        parts = [str(torch_root.parent), *module.split(".")]
    else:
        return None
    path = Path(*parts)
    return next((p for p in (path.with_suffix(".py"), path / "__init__.py") if p.is_file()), None)


def definition(path: Path, name: str, torch_root: Path, hops: int = 2) -> tuple[Path, int, str] | None:
    """Where `name` is defined, seen from the module at path: a function or method of it, or followed
    through the module's `from ... import name` (function-level imports too)."""
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                    return path, _first_line(item), f"{node.name}.{name}"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name and node.col_offset == 0:
            return path, _first_line(node), name
    if hops:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
                original = next(a.name for a in node.names if (a.asname or a.name) == name)
                target = _module_file(torch_root, path, node.module, node.level)
                if target is not None:
                    return definition(target, original, torch_root, hops - 1)
    return None


def none_producer(frame: Frame, raised: str, message: str) -> Suspect | None:
    """The function whose None the frame used, when the exception says a None was used and the frame's own
    source shows the call it came from."""
    path = Path(frame.file)
    cut = frame.file.replace("\\", "/").rfind("/torch/")
    if cut < 0:
        return None
    torch_root = Path(frame.file[:cut]) / "torch"
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    scope: ast.AST = innermost_function(tree, frame.line) or tree
    called = _produced_by(scope, frame.line, message)
    name = callee_name(called) if called is not None else None
    # a bare name may be a closure of the line's scope; an attribute (`self.f`) never is
    nested = _enclosing_definition(tree, frame.line, called.id) if isinstance(called, ast.Name) else None
    found = (path, *nested) if nested else definition(path, name, torch_root) if name else None
    if found is None:
        return None
    file, line, qualname = found
    return Suspect(file=relative_torch_path(str(file)), line=line, function=qualname, evidence=["exception"],
                   why=f"returned the None that {frame.function} (line {frame.line}) used: {raised}")


def exception_suspects(error_text: str) -> list[Suspect]:
    """The innermost torch frames of the first exception raised inside torch, plumbing skipped; none above
    generated code that raised."""
    parsed = parse(error_text)
    for block in parsed.blocks:
        generated = [i for i, f in enumerate(block.frames) if f.in_generated_code()]
        if generated:
            # raised in (or under) code Inductor generated: the torch frames that called it only run it;
            # what generated it is localize's to find
            frames = [f for f in block.frames[generated[-1] + 1:] if f.in_torch]
            if not frames:
                return []
        else:
            frames = [f for f in block.frames if f.in_torch]
        if not frames:
            continue
        exc = block.exc
        raised = f"{exc.type}" if exc is not None and getattr(exc, "type", None) else None
        out: list[Suspect] = []
        limit = MAX_FRAMES
        inner_skipped = False
        for depth, frame in enumerate(reversed(frames)):
            rel = relative_torch_path(frame.file)
            # plumbing, code torch generated under a made-up name (`subclass_codegen.py:codegen(...)`), or a
            # lambda that only hands over to plumbing (`lambda: unimplemented(...)`)
            inner_skipped = (PLUMBING_FILES.search(rel) is not None or PLUMBING_FUNCTIONS.match(frame.function)
                             is not None or not rel.endswith(".py") or (frame.function == "<lambda>" and inner_skipped))
            if inner_skipped:
                continue
            if raised is None:  # a traceback cut before its exception line
                why = ("innermost torch frame where the traceback stops (no exception line shown)" if not out else
                       f"calls the frame above ({depth} frame(s) out from where the traceback stops)")
            else:
                why = (f"innermost torch frame of {raised}" if not out else
                       f"calls the frame above ({depth} frame(s) out from where {raised} was raised)")
            if not out and exc is not None and NONE_USED.search(exc.message or ""):
                producer = none_producer(frame, f"{raised}: {exc.message.strip()[:120]}", exc.message)
                out += [producer] if producer is not None else []
                limit = MAX_FRAMES + len(out)
            out.append(Suspect(file=rel, line=frame.line, function=frame.function, why=why, evidence=["exception"]))
            if len(out) >= limit:
                break
        if out:
            return _unique(out)
    return []


MAX_NONE_ORIGINS = 3


def _own_returns(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Return]:
    """The function's own return statements (not a nested function's)."""
    out: list[ast.Return] = []
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return):
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _is_none(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _allows_none(annotation: ast.expr) -> bool:
    """Whether a return annotation says None may come back: None, Optional[...], `X | None`, Union[..., None] or
    a bare type variable (`T`); an annotation that cannot be read counts as saying so. Any and object say
    nothing either way, as no annotation does."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return True
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _allows_none(annotation.left) or _allows_none(annotation.right)
    name = (annotation.id if isinstance(annotation, ast.Name) else annotation.attr
            if isinstance(annotation, ast.Attribute) else None)
    if isinstance(annotation, ast.Subscript):
        outer = annotation.value
        outer_name = outer.id if isinstance(outer, ast.Name) else outer.attr if isinstance(outer, ast.Attribute) else ""
        if outer_name == "Optional":
            return True
        if outer_name == "Union":
            members = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
            return any(_allows_none(m) for m in members)
        return False
    return _is_none(annotation) or name in {"NoReturn", "Never"} or (name is not None and len(name) == 1)


# a docstring that promises a None ("Returns ``None`` if the source isn't covered", "..., or None if it fails")
# "Returns ``None`` if ...", "or None": not a None listed among types ("Returns: ... (int, str, None, Tensor)")
_DOCUMENTED_NONE = re.compile(r"\breturn(?:s|ed)?\b[^.]{0,40}?(?<!, )\bNone\b(?!,)|\bor\s+`*None\b", re.IGNORECASE)


def _wanted_none(fn: ast.FunctionDef | ast.AsyncFunctionDef, line: int | None) -> str | None:
    """How the function's None at `line` reads when someone may have wanted a value: an explicit `return None`,
    or a bare return or the end of a body that returns a value elsewhere. None for a procedure's None, or where
    the return annotation or the docstring admits None."""
    if fn.returns is not None and _allows_none(fn.returns) or _DOCUMENTED_NONE.search(ast.get_docstring(fn) or ""):
        return None
    returns = _own_returns(fn)
    there = next((r for r in returns if r.lineno == line), None)
    valued = any(r.value is not None and not _is_none(r.value) for r in returns)
    if there is not None and _is_none(there.value):
        how = "`return None`"
    elif there is not None and there.value is None and valued:
        how = "a bare `return`"
    elif valued:  # no return there, or one with a value: Python puts the end of a body on the last line it ran
        how = "the end of its body"
    else:
        return None
    says = (None if fn.returns is None else fn.returns.value if isinstance(fn.returns, ast.Constant)
            and isinstance(fn.returns.value, str) else ast.unparse(fn.returns))
    return how if says in (None, "Any", "object") else f"{how}, though it is annotated to return {says}"


def none_origin_suspects(returns: list[dict], torch_root: Path, raised: str, used: bool = True) -> list[Suspect]:
    """Of the functions a run saw return a None they made (most recent first, before the exception), those
    whose None someone may have wanted (`_wanted_none`): the ones made beneath a deeper frame of the exception's
    traceback first (a None made while tracing a graph is used by the code that traced it, not by an unrelated
    lookup earlier), then the most recent. At most MAX_NONE_ORIGINS. `used`: the exception says it used a None;
    otherwise (an invariant that broke) only an explicit `return None` beneath a frame of its traceback."""
    found: list[Suspect] = []
    trees: dict[str, dict[int, ast.FunctionDef | ast.AsyncFunctionDef] | None] = {}
    ordered = sorted(enumerate(returns, 1), key=lambda pair: -_shared(pair[1]))
    for n, entry in ordered:
        file, function = str(entry.get("file", "")), str(entry.get("function", ""))
        first, line = entry.get("first_line"), entry.get("line")
        if not file.endswith(".py") or function.rsplit(".", 1)[-1].startswith("<") or not isinstance(first, int):
            continue
        if file not in trees:
            try:
                tree = ast.parse((torch_root / file).read_text(errors="replace"))
            except (OSError, SyntaxError, ValueError):
                trees[file] = None
            else:
                trees[file] = {_first_line(node): node for node in ast.walk(tree)
                               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        fn = (trees[file] or {}).get(first)
        how = _wanted_none(fn, line if isinstance(line, int) else None) if fn is not None else None
        meet = entry.get("meet")
        if how is None or not used and (not meet or not how.startswith("`return None`")):
            continue
        beneath = f", called beneath `{meet}`, which the exception's traceback also runs through" if meet else ""
        what = f"{raised} used a None" if used else f"{raised} was raised (the None may be what broke it)"
        found.append(Suspect(
            file=file, line=line if isinstance(line, int) else first, function=function, evidence=["none_origin"],
            why=(f"returned None through {how} (line {line}) shortly before {what}: the "
                 f"{_ordinal(n)} None counting back from the exception that a compiler function made in that run"
                 f"{beneath}")))
        if len(found) >= MAX_NONE_ORIGINS:
            break
    return found


def _shared(entry: dict) -> int:
    shared = entry.get("shared")
    return shared if isinstance(shared, int) else 0


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def none_used(error_text: str) -> str | None:
    """`Type: message` of the first exception raised inside torch, when it says it used a None."""
    exc = _first_in_torch(error_text)
    if exc is not None and NONE_USED.search(exc.message or ""):
        return f"{exc.type}: {exc.message.strip()[:120]}"
    return None


def broken_invariant(error_text: str) -> str | None:
    """`AssertionError: message` of the first exception raised inside torch, when it is an assertion: an
    invariant broke, and what broke it was made elsewhere (a None returned where a value was meant, perhaps)."""
    exc = _first_in_torch(error_text)
    if exc is not None and (exc.type or "").rsplit(".", 1)[-1] == "AssertionError":
        return f"{exc.type}: {exc.message.strip()[:120]}"
    return None


def _first_in_torch(error_text: str):
    for block in parse(error_text).blocks:
        if any(f.in_torch for f in block.frames):
            return block.exc
    return None


def _unique(suspects: list[Suspect]) -> list[Suspect]:
    seen: set[tuple[str, int | None]] = set()
    out = []
    for s in suspects:
        if (s.file, s.line) not in seen:
            seen.add((s.file, s.line))
            out.append(s)
    return out


# --------------------------------------------------------------------------------------------
# one ranking: every kind of evidence, weighed by one table

EVIDENCE_WEIGHT: dict[SuspectEvidence, float] = {
    "bisection": 8.0, "config": 8.0, "exception": 4.0, "none_origin": 4.0, "guards": 4.0, "recent_change": 3.0,
    "spectrum": 3.0,  # times the function's score relative to the top one's
    "helper": 1.0, "codegen": 1.0, "fx_codegen": 4.0, "graph_break": 4.0,
}
MAX_SPECTRUM_SUSPECTS = 5
SPECTRUM_RANKED = 10  # functions localize asks analysis.spectra.rank for


def spectrum_suspects(ranked: list[RankedFunction], formula: str, failing: int, passing: int
                      ) -> list[tuple[Suspect, int]]:
    """The top ranked functions as suspects, each with its function's last line."""
    out = []
    for r in ranked[:MAX_SPECTRUM_SUSPECTS]:
        where = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in r.failing_only)
        tied = sum(1 for other in ranked if other.score == r.score) - 1
        more = "or more " if tied == len(ranked) - 1 and len(ranked) >= SPECTRUM_RANKED else ""
        why = (f"execution spectra: {formula} {r.score:.2f} ({r.lines_at_score} line(s) at that score); ran in "
               f"{r.failed_runs}/{failing} failing and {r.passed_runs}/{passing} passing runs"
               + (f"; lines {where} ran only in failing runs" if where else "")
               + (f"; tied with {tied} {more}other function(s) at that score, which the variants run so far do "
                  "not tell apart" if tied else ""))
        suspect = Suspect(file=r.file, line=r.first, function=r.function, why=why, evidence=["spectrum"],
                          lines=[LineRange(first=a, last=b) for a, b in r.failing_only], score=round(r.score, 3))
        out.append((suspect, r.last))
    return out


def merge(suspects: list[Suspect], spectral: list[tuple[Suspect, int]]) -> list[Suspect]:
    """One list: a spectrum suspect that another kind of evidence already names (its function holds that
    suspect's line) joins it; then all are ordered by EVIDENCE_WEIGHT summed over their evidence, ties kept in
    the order given (the dedicated mechanisms' own order first)."""
    out = [s.model_copy() for s in suspects]
    for sp, last in spectral:
        held = [s for s in out if s.file == sp.file and (s.function == sp.function or (
            s.line is not None and (sp.line or 0) <= s.line <= last))]
        if held:
            for s in held:
                s.evidence = [*s.evidence, "spectrum"]
                s.lines, s.score, s.why = sp.lines, sp.score, f"{s.why}; {sp.why}"
        else:
            out.append(sp)
    top = max((s.score or 0.0 for s in out), default=0.0) or 1.0

    def weight(s: Suspect) -> float:
        return sum(EVIDENCE_WEIGHT[e] * ((s.score or 0.0) / top if e == "spectrum" else 1.0) for e in s.evidence)

    return sorted(out, key=lambda s: -weight(s))
