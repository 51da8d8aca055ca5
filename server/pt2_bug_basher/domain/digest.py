"""Content digests that evidence keeps, to tell later whether a file is still what was checked."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path


def file_digest(path: Path) -> str | None:
    """The SHA-256 of the file's content (None when it cannot be read)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def test_function_of(node_id: str | None) -> str | None:
    """`test/x.py::Cls::test_a[param]` -> `test_a`."""
    return node_id.split("::")[-1].split("[", 1)[0] if node_id and "::" in node_id else None


def _other_tests_out(body: list[ast.stmt], keep: str) -> list[ast.stmt]:
    """The statements without the test functions (and test methods of classes) other than `keep`."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name.startswith("test") \
                and stmt.name != keep:
            continue
        if isinstance(stmt, ast.ClassDef):
            stmt.body = _other_tests_out(stmt.body, keep) or [ast.Pass()]
        out.append(stmt)
    return out


def python_source_digest(path: Path, test: str | None = None) -> str | None:
    """A digest of what a Python file means, not how it is laid out: its syntax tree, with the module's
    imports (and the names inside each) in sorted order. Formatting, comments and import order (what a
    linter fixes) leave it as it was; any other edit changes it, except, given `test`, an edit to another
    test function of the file. The plain file digest when it does not parse; None when it cannot be read."""
    try:
        tree = ast.parse(path.read_bytes())
    except OSError:
        return None
    except (SyntaxError, ValueError):
        return file_digest(path)
    if test is not None:
        tree.body = _other_tests_out(tree.body, test)
    imports: list[str] = []
    rest: list[ast.stmt] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            stmt.names.sort(key=lambda alias: (alias.name, alias.asname or ""))
            imports.append(ast.dump(stmt))
        else:
            rest.append(stmt)
    text = "\n".join(sorted(imports)) + "\n" + "\n".join(ast.dump(stmt) for stmt in rest)
    return hashlib.sha256(text.encode()).hexdigest()
