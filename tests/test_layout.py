"""The package's layout holds: one step function module per step, thin tool adapters, no import cycles, and
no import that runs up the layers."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "server" / "pt2_bug_basher"
STEP_MODULES = {"environment", "reproduce", "logs", "classify", "localize", "reduce", "register_test",
                "main_check", "artifacts", "verify", "review", "celebrate"}
MAX_ADAPTER_LINES = 50
# The layers, lowest first: a module imports only from its own rank or below (function-level imports too).
LAYER_RANK = {
    "pt2_bug_basher": 0,  # the package root: __version__ alone
    "domain": 0,  # values, names, errors, the calls' grammar: no I/O
    "playbooks": 1, "content": 1,  # the method's tables and the skill's text, as data
    "case": 2,  # the case store, paths, workflow gates
    "analysis": 3,  # parsers and judges of what runs printed: reads files, runs nothing
    "execution": 4,  # processes, git, worktrees, the warm interpreter, the server's state
    "artifacts": 5, "reduce": 6, "report": 7,
    "steps": 8,  # one function per step of the method
    "mcp_server": 9, "cli": 9,  # the two adapters over the steps, side by side (`serve` starts the MCP server)
    "docsync": 10, "__main__": 10,
}


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


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]], rank: dict[str, int]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, deps in graph.items() for b in deps if rank[layer_of(b)] > rank[layer_of(a)])


def test_the_upward_import_finder_finds_one():
    graph = {"p.low.x": {"p.high.y"}, "p.high.y": {"p.low.x"}, "p.low.z": set()}
    assert upward_imports(graph, {"low": 0, "high": 1}) == [("p.low.x", "p.high.y")]


def test_every_layer_has_a_rank_and_no_import_runs_up():
    graph = import_graph()
    assert {layer_of(m) for m in graph} <= set(LAYER_RANK), {layer_of(m) for m in graph} - set(LAYER_RANK)
    assert upward_imports(graph, LAYER_RANK) == []


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


MAX_FUNCTION_LINES = 80  # _probes/ run inside the user's interpreter, standalone: they are left out


def long_functions(tree: ast.AST, limit: int) -> list[tuple[str, int]]:
    """(name, lines) of each function or method longer than limit, nested ones counted in their parent."""
    return [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno
            and n.end_lineno - n.lineno + 1 > limit]


def test_the_long_function_finder_finds_one():
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    tree = ast.parse(f"def short():\n    pass\n\ndef long():\n{body}\n")
    assert long_functions(tree, 5) == [("long", 6)]


def test_no_function_over_80_lines_outside_the_probes():
    found = [f"{p.relative_to(PACKAGE)}: {name} {lines}" for p in sorted(PACKAGE.rglob("*.py"))
             if "_probes" not in p.parts
             for name, lines in long_functions(ast.parse(p.read_text(encoding="utf-8")), MAX_FUNCTION_LINES)]
    assert found == []
