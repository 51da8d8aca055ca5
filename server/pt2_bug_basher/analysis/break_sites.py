"""Where Dynamo decided to break the graph, and what decided it.

A graph break Dynamo reports (an `Unsupported`, or the reason a higher-order op could not be captured) names its
`gb_type`, the literal Dynamo passes to `unimplemented(gb_type=...)` at one site of its source. Its traceback
rarely shows that site: the error is re-raised elsewhere, and Dynamo strips its own frames. The site is found in
the case's torch by that literal; what sent Dynamo there is the condition that guards the call (`if not
only_consist_of(operands, ...)`), so the functions that condition calls are suspects, ahead of the site's own
function. A wrongly taken graph break is a bug in one of them more often than in the code that raises it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from pt2_bug_basher.analysis.spectra import tree_function_spans
from pt2_bug_basher.analysis.suspects import callee_name, definition
from pt2_bug_basher.domain.evidence import Suspect

TRACEBACK = "Traceback (most recent call last):"
EXPLANATION = re.compile(r"^\s+Explanation: (?P<text>.*)$")
EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Error|Unsupported|Exception)\w*: (?P<rest>.+)$")
SEARCHED = ("_dynamo",)  # the packages whose `unimplemented` calls raise graph breaks
MAX_SITES = 2
MAX_DECIDERS = 3
# calls in a condition that decide nothing of Dynamo's own
NOT_DECIDERS = frozenset({"isinstance", "issubclass", "len", "hasattr", "getattr", "callable", "type", "id", "all",
                          "any", "tuple", "list", "set", "dict", "str", "int", "bool", "sorted", "zip"})


@dataclass(frozen=True)
class GraphBreak:
    gb_type: str
    explanation: str


@dataclass(frozen=True)
class BreakSite:
    file: str  # relative to the torch package's parent
    line: int
    function: str
    first_line: int
    condition: str | None  # the source of the nearest condition that guards the call ("not (...)" for an else)
    deciders: tuple[tuple[str, int, str], ...]  # (file, first line, qualified name) of the functions it calls


def graph_breaks(error_text: str) -> list[GraphBreak]:
    """The graph breaks the text's last traceback reports (not a logged one the run went on after): each
    `Explanation:` line and the gb_type line above it."""
    lines = error_text[max(0, error_text.rfind(TRACEBACK)):].splitlines()
    out: list[GraphBreak] = []
    for i, line in enumerate(lines):
        found = EXPLANATION.match(line)
        if found is None:
            continue
        for above in reversed(lines[max(0, i - 6):i]):
            if above.strip() and not above[0].isspace():
                head = EXCEPTION_LINE.match(above.strip())
                gb_type = (head["rest"] if head else above).strip()
                if gb_type and GraphBreak(gb_type, found["text"].strip()) not in out:
                    out.append(GraphBreak(gb_type, found["text"].strip()))
                break
    return out


def _guard(chain: list[ast.AST]) -> tuple[ast.expr, bool] | None:
    """The nearest condition that guards the last node of the chain (outermost first): the test of an `if`
    it sits under, and whether it is in the `else`; the calls of a `try` body it handles the failure of."""
    for parent, child in zip(reversed(chain[:-1]), reversed(chain[1:]), strict=True):
        if isinstance(parent, ast.If):
            if child in parent.body:
                return parent.test, False
            if child in parent.orelse:
                return parent.test, True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
    return None


def _chain_to(tree: ast.AST, target: ast.AST) -> list[ast.AST]:
    """The nodes from tree down to target."""
    path: list[ast.AST] = []

    def down(node: ast.AST) -> bool:
        path.append(node)
        if node is target:
            return True
        if any(down(child) for child in ast.iter_child_nodes(node)):
            return True
        path.pop()
        return False

    down(tree)
    return path


def _is_site(node: ast.AST, gb_type: str) -> bool:
    return (isinstance(node, ast.Call) and (callee_name(node.func) or "").startswith("unimplemented") and any(
        k.arg == "gb_type" and isinstance(k.value, ast.Constant) and k.value.value == gb_type for k in node.keywords))


def break_sites(gb: GraphBreak, torch_dir: Path) -> list[BreakSite]:
    """The `unimplemented(gb_type=...)` calls of the case's torch that raise this graph break."""
    out: list[BreakSite] = []
    parent = torch_dir.parent
    for package in SEARCHED:
        for path in sorted((torch_dir / package).rglob("*.py")):
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if gb.gb_type not in text:
                continue
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError):
                continue
            spans = tree_function_spans(tree)
            for node in ast.walk(tree):
                if not _is_site(node, gb.gb_type):
                    continue
                line = getattr(node, "lineno", 0)
                holding = [s for s in spans if s.first <= line <= s.last]
                if not holding:
                    continue
                span = min(holding, key=lambda s: s.last - s.first)
                guard = _guard(_chain_to(tree, node))
                condition, deciders = None, []
                if guard is not None:
                    test, negated = guard
                    condition = f"not ({ast.unparse(test)})" if negated else ast.unparse(test)
                    for call in (n for n in ast.walk(test) if isinstance(n, ast.Call)):
                        name = callee_name(call.func)
                        found = definition(path, name, torch_dir) if name and name not in NOT_DECIDERS else None
                        if found is not None:
                            where, first, qualname = found
                            deciders.append((where.relative_to(parent).as_posix() if where.is_relative_to(parent)
                                             else str(where), first, qualname))
                out.append(BreakSite(path.relative_to(parent).as_posix(), line, span.qualname, span.first,
                                     condition, tuple(dict.fromkeys(deciders))[:MAX_DECIDERS]))
                if len(out) >= MAX_SITES:
                    return out
    return out


def break_site_suspects(error_text: str, torch_dir: Path | None) -> list[Suspect]:
    """For each graph break the text reports: the functions the condition guarding its site calls, then the
    site's function."""
    if torch_dir is None or not torch_dir.is_dir():
        return []
    out: list[Suspect] = []
    for gb in graph_breaks(error_text)[:MAX_SITES]:
        for site in break_sites(gb, torch_dir):
            where = f"{site.file}:{site.line}"
            for file, first, qualname in site.deciders:
                out.append(Suspect(file=file, line=first, function=qualname, evidence=["graph_break"], why=(
                    f"decides `{(site.condition or '')[:100]}`, the condition under which Dynamo raises the graph "
                    f"break \"{gb.gb_type}\" ({where}, in {site.function}): {gb.explanation[:120]}")))
            out.append(Suspect(file=site.file, line=site.line, function=site.function, evidence=["graph_break"], why=(
                f"raises the graph break \"{gb.gb_type}\" at line {site.line}"
                + (f", when `{site.condition[:100]}`" if site.condition else "") + f": {gb.explanation[:120]}")))
    unique: list[Suspect] = []
    for s in out:
        if (s.file, s.function) not in {(u.file, u.function) for u in unique}:
            unique.append(s)
    return unique
