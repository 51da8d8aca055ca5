"""The package's layout holds: one step function module per step, thin tool adapters, no import cycles."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "server" / "pt2_bug_basher"
STEP_MODULES = {"environment", "reproduce", "logs", "classify", "localize", "reduce", "register_test",
                "main_check", "artifacts", "verify", "review", "celebrate"}
MAX_ADAPTER_LINES = 50


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Package module -> package modules it imports (at any depth: function-level imports count too)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "_probes" not in p.parts}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                candidates = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            found.update(c for c in candidates if c in modules)
        graph[name] = found - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package():
    graph = import_graph()
    assert "pt2_bug_basher.steps.reproduce" in graph
    assert cycles(graph) == []


def test_one_step_module_per_step_and_a_light_steps_package():
    found = {p.stem for p in (PACKAGE / "steps").glob("*.py") if p.stem != "__init__"}
    assert found >= STEP_MODULES, STEP_MODULES - found
    init = ast.parse((PACKAGE / "steps" / "__init__.py").read_text())
    assert not [n for n in ast.walk(init) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_tool_modules_are_thin_adapters_over_steps():
    tools = [p for p in (PACKAGE / "mcp_server" / "tools").glob("*.py") if not p.name.startswith("_")]
    assert len(tools) >= 13
    for path in tools:
        lines = path.read_text(encoding="utf-8").splitlines()
        assert len(lines) <= MAX_ADAPTER_LINES, f"{path.name}: {len(lines)} lines"
    graph = import_graph()
    for name, deps in graph.items():
        if name.startswith("pt2_bug_basher.steps."):
            assert not any(d.startswith("pt2_bug_basher.mcp_server") for d in deps), (name, deps)
