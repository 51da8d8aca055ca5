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


def python_source_digest(path: Path) -> str | None:
    """A digest of what a Python file means, not how it is laid out: its syntax tree, with the module's
    imports (and the names inside each) in sorted order. Formatting, comments and import order (what a
    linter fixes) leave it as it was; any other edit changes it. The plain file digest when it does not
    parse; None when it cannot be read."""
    try:
        tree = ast.parse(path.read_bytes())
    except OSError:
        return None
    except (SyntaxError, ValueError):
        return file_digest(path)
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
