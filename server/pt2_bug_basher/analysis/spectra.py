"""Spectrum-based fault localisation on the lines of torch's compiler that runs executed.

Each run of a case recorded a spectrum (the lines of torch's compiler packages it ran) and is
judged failing (the case's failure) or passing. A line's suspiciousness comes from four counts:
ef/ep, failing/passing runs that ran it, nf/np, those that did not. Lines roll up to the innermost
function that holds them (its highest-scoring line; ties broken by how many of its lines share that
score, then by how few passing runs ran it at all). Pure: sources come in as text.
"""

from __future__ import annotations

import ast
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Formula = Literal["ochiai", "dstar"]


def ochiai(ef: int, ep: int, nf: int, np_: int) -> float:
    total_failed = ef + nf
    return ef / math.sqrt(total_failed * (ef + ep)) if ef and total_failed else 0.0


def dstar(ef: int, ep: int, nf: int, np_: int) -> float:
    """DStar with star 2; a line no passing run ran and every failing run ran (denominator 0) scores as
    if the denominator were 1/2, above any line with a denominator of 1."""
    if not ef:
        return 0.0
    return ef ** 2 / (ep + nf if ep + nf else 0.5)


FORMULAS: dict[Formula, Callable[[int, int, int, int], float]] = {"ochiai": ochiai, "dstar": dstar}
MAX_RANGES = 6
RANGE_GAP = 3  # lines ran only in failing runs this close together read as one range


@dataclass(frozen=True)
class Spectrum:
    """One run: the lines it ran, by file relative to torch's parent folder (`torch/_dynamo/x.py`)."""

    run_id: str
    failed: bool
    lines: Mapping[str, frozenset[int]]
    label: str = ""
    root: str = ""
    """the folder the files are relative to (torch's parent)"""


@dataclass(frozen=True)
class FunctionSpan:
    qualname: str
    first: int
    last: int


@dataclass
class RankedFunction:
    file: str
    function: str
    first: int
    last: int
    score: float
    lines_at_score: int
    """its lines that share its score"""
    failing_only: list[tuple[int, int]] = field(default_factory=list)
    """line ranges that ran in failing runs and in no passing run"""
    failed_runs: int = 0
    passed_runs: int = 0
    """passing runs that ran any line of it"""


def function_spans(source: str) -> list[FunctionSpan]:
    """Every function with its qualified name (Class.method, outer.<locals>.inner), decorators included."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    return tree_function_spans(tree)


def tree_function_spans(tree: ast.AST) -> list[FunctionSpan]:
    """function_spans of a parsed module."""
    out: list[FunctionSpan] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                out.append(FunctionSpan(name, first, child.end_lineno or child.lineno))
                visit(child, name + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def _innermost(spans: list[FunctionSpan]) -> Callable[[int], FunctionSpan | None]:
    by_line: dict[int, FunctionSpan] = {}
    for span in sorted(spans, key=lambda s: s.last - s.first, reverse=True):  # inner (shorter) spans win
        for line in range(span.first, span.last + 1):
            by_line[line] = span
    return by_line.get


def _ranges(lines: Iterable[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for line in sorted(lines):
        if out and line - out[-1][1] <= RANGE_GAP:
            out[-1] = (out[-1][0], line)
        else:
            out.append((line, line))
    return out


def rank(spectra: list[Spectrum], sources: Mapping[str, str], formula: Formula = "ochiai",
         limit: int = 10) -> list[RankedFunction]:
    """Functions by suspiciousness, most suspicious first; empty without both a failing and a passing run
    (nothing then separates the guilty lines from those every run passes through). Lines outside any
    function (module level: run at import) are left out, and so are files missing from `sources`."""
    failing = [s for s in spectra if s.failed]
    passing = [s for s in spectra if not s.failed]
    if not failing or not passing:
        return []
    score_of = FORMULAS[formula]
    ef: dict[tuple[str, int], int] = defaultdict(int)
    ep: dict[tuple[str, int], int] = defaultdict(int)
    for s in failing:
        for file, lines in s.lines.items():
            for line in lines:
                ef[(file, line)] += 1
    for s in passing:
        for file, lines in s.lines.items():
            for line in lines:
                ep[(file, line)] += 1
    nfail, npass = len(failing), len(passing)
    locate = {file: _innermost(function_spans(text)) for file, text in sources.items()}
    best: dict[tuple[str, FunctionSpan], RankedFunction] = {}
    only: dict[tuple[str, FunctionSpan], list[int]] = defaultdict(list)
    for (file, line), e_f in ef.items():
        find = locate.get(file)
        span = find(line) if find else None
        if span is None:
            continue
        e_p = ep.get((file, line), 0)
        score = score_of(e_f, e_p, nfail - e_f, npass - e_p)
        key = (file, span)
        if e_p == 0:
            only[key].append(line)
        got = best.get(key)
        if got is None:
            best[key] = RankedFunction(file, span.qualname, span.first, span.last, score, 1)
        elif score > got.score:
            got.score, got.lines_at_score = score, 1
        elif score == got.score:
            got.lines_at_score += 1
    ran = [_functions_ran(s, locate) for s in spectra]
    for key, ranked in best.items():
        ranked.failing_only = _ranges(only.get(key, []))[:MAX_RANGES]
        ranked.failed_runs = sum(1 for s, hit in zip(spectra, ran, strict=True) if s.failed and key in hit)
        ranked.passed_runs = sum(1 for s, hit in zip(spectra, ran, strict=True) if not s.failed and key in hit)
    ordered = sorted(best.values(), key=lambda r: (-r.score, -r.lines_at_score, r.passed_runs, r.file, r.first))
    return [r for r in ordered if r.score > 0][:limit]


def _functions_ran(spectrum: Spectrum, locate: Mapping[str, Callable[[int], FunctionSpan | None]]
                   ) -> set[tuple[str, FunctionSpan]]:
    return {(file, span) for file, find in locate.items() for line in spectrum.lines.get(file, ())
            if (span := find(line)) is not None}


def files_to_read(spectra: list[Spectrum]) -> set[str]:
    """The files that hold a line some failing run ran and not every passing run did: only these can rank."""
    failing = [s for s in spectra if s.failed]
    passing = [s for s in spectra if not s.failed]
    out: set[str] = set()
    for s in failing:
        for file, lines in s.lines.items():
            if file in out:
                continue
            if not passing or any(not lines <= p.lines.get(file, frozenset()) for p in passing):
                out.add(file)
    return out


@dataclass(frozen=True)
class ChangedLine:
    """A recently changed line a failing run ran."""

    file: str
    line: int
    score: float
    failed_runs: int
    passed_runs: int


def changed_lines_ran(spectra: list[Spectrum], changed: Mapping[str, Iterable[int]], formula: Formula = "ochiai",
                      own: bool = False) -> list[ChangedLine]:
    """The changed lines some failing run ran and not every passing run did (a line every run ran cannot tell
    them apart), most suspicious first; empty without both a failing and a passing run. `own`: the user's own
    edits, where the change itself is evidence: every one a failing run ran, with or without passing runs."""
    failing = [s for s in spectra if s.failed]
    passing = [s for s in spectra if not s.failed]
    if not failing or not (passing or own):
        return []
    score_of = FORMULAS[formula]
    out = []
    for file, lines in changed.items():
        for line in lines:
            e_f = sum(1 for s in failing if line in s.lines.get(file, ()))
            e_p = sum(1 for s in passing if line in s.lines.get(file, ()))
            if e_f and (own or e_p < len(passing)):
                score = score_of(e_f, e_p, len(failing) - e_f, len(passing) - e_p)
                out.append(ChangedLine(file, line, score, e_f, e_p))
    return sorted(out, key=lambda c: (-c.score, c.file, c.line))
