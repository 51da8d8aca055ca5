"""Site selection: every mutation cosmic-ray's operators can make on a line the kill programs ran
(coverage.py, one context per program), inside a function of a compiler package."""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

import coverage
from cosmic_ray.ast import ast_nodes, get_ast
from cosmic_ray.mutating import mutate_code
from operators import OPERATOR_NAMES, operator

# path prefix (relative to the torch checkout) -> layer; first match wins
LAYERS: tuple[tuple[str, str], ...] = (
    ("torch/_functorch/", "aotautograd"),
    ("torch/_dynamo/", "dynamo"),
    # the GPU layer (only CUDA programs reach it): Triton code generation, its configs and autotuning, CUDA graphs
    ("torch/_inductor/codegen/triton", "gpu"),
    ("torch/_inductor/codegen/simd", "gpu"),
    ("torch/_inductor/codegen/cuda_combined_scheduling.py", "gpu"),
    ("torch/_inductor/runtime/triton_heuristics.py", "gpu"),
    ("torch/_inductor/runtime/coordinate_descent_tuner.py", "gpu"),
    ("torch/_inductor/runtime/static_triton_launcher.py", "gpu"),
    ("torch/_inductor/template_heuristics/", "gpu"),
    ("torch/_inductor/cudagraph_", "gpu"),
    ("torch/_inductor/", "inductor"),
    ("torch/_decomp/", "decomp"),
    ("torch/_refs/", "decomp"),
    ("torch/_prims/", "decomp"),
    ("torch/fx/", "fx"),
    ("torch/export/", "export"),
    ("torch/_export/", "export"),
    ("torch/_higher_order_ops/", "higher_order_ops"),
    ("torch/_subclasses/", "subclasses"),
)


def layer_of(rel: str) -> str | None:
    return next((layer for prefix, layer in LAYERS if rel.startswith(prefix)), None)


@dataclass(frozen=True)
class Site:
    file: str  # relative to the checkout
    line: int
    function: str
    span: tuple[int, int]
    operator: str
    occurrence: int

    @property
    def id(self) -> str:
        digest = hashlib.sha256(f"{self.file}:{self.operator}:{self.occurrence}".encode()).hexdigest()[:10]
        return f"{layer_of(self.file)}-{digest}"


def covered_lines(data_file: Path, checkout: Path) -> dict[str, dict[int, set[str]]]:
    """file (relative) -> line -> the programs that ran it."""
    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    out: dict[str, dict[int, set[str]]] = {}
    for path in data.measured_files():
        if not Path(path).is_relative_to(checkout):
            continue
        rel = Path(path).relative_to(checkout).as_posix()
        if layer_of(rel) is None:
            continue
        by_line = out.setdefault(rel, {})
        for line, contexts in (data.contexts_by_lineno(path) or {}).items():
            programs = {c for c in contexts if c}
            if programs:
                by_line.setdefault(line, set()).update(programs)
    return out


def function_spans(source: str) -> list[tuple[int, int, str]]:
    """(first, last, qualified name) of every function, outermost first."""
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                spans.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, name + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return spans


def innermost(spans: list[tuple[int, int, str]], line: int) -> tuple[int, int, str] | None:
    holding = [s for s in spans if s[0] <= line <= s[1]]
    return min(holding, key=lambda s: s[1] - s[0]) if holding else None


def sites_in(checkout: Path, rel: str, lines: set[int]) -> list[Site]:
    """Every (operator, occurrence) whose mutation starts on a covered line inside a function body."""
    source = (checkout / rel).read_text()
    spans = function_spans(source)
    tree = get_ast(source)
    out = []
    ops = [(name, operator(name)) for name in OPERATOR_NAMES]
    counts = dict.fromkeys(OPERATOR_NAMES, 0)
    for node in ast_nodes(tree):
        for name, op in ops:
            for (start, _col), _end in op.mutation_positions(node):
                occurrence = counts[name]
                counts[name] += 1
                if start not in lines:
                    continue
                fn = innermost(spans, start)
                if fn is None or fn[0] == start:  # not in a function, or on its def line
                    continue
                out.append(Site(rel, start, fn[2], (fn[0], fn[1]), name, occurrence))
    return out


def edit_of(source: str, mutated: str) -> tuple[str, str]:
    """The smallest block of whole lines that differs, widened until it occurs once in source."""
    a, b = source.splitlines(keepends=True), mutated.splitlines(keepends=True)
    first = 0
    while first < min(len(a), len(b)) and a[first] == b[first]:
        first += 1
    tail = 0
    while tail < min(len(a), len(b)) - first and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    lo, hi_a, hi_b = first, len(a) - tail, len(b) - tail
    while True:
        old, new = "".join(a[lo:hi_a]), "".join(b[lo:hi_b])
        if source.count(old) == 1:
            assert source.replace(old, new, 1) == mutated
            return old, new
        lo, hi_a, hi_b = max(lo - 1, 0), hi_a + 1, hi_b + 1


def mutate(checkout: Path, site: Site) -> tuple[str, str] | None:
    """(original, mutated) text of the site's one-occurrence edit, or None if cosmic-ray makes no change."""
    source = (checkout / site.file).read_text()
    mutated = mutate_code(source, operator(site.operator), site.occurrence)
    if mutated is None or mutated == source:
        return None
    try:
        compile(mutated, site.file, "exec")
    except SyntaxError:
        return None
    return edit_of(source, mutated)
