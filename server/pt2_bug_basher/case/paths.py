"""Confinement: every path a tool accepts must resolve (symlinks followed) under an allowed root."""

from __future__ import annotations

import os
from pathlib import Path

from pt2_bug_basher.domain.errors import InvalidInput

MAX_PATH_CHARS = 4096


def check_text(value: str, what: str, max_chars: int = MAX_PATH_CHARS) -> str:
    if not value or not value.strip():
        raise InvalidInput(f"{what} is empty: pass a path.")
    if "\x00" in value:
        raise InvalidInput(f"{what} contains a NUL byte: pass a plain path.")
    if len(value) > max_chars:
        raise InvalidInput(f"{what} is {len(value)} characters long; the limit is {max_chars}.")
    return value


def resolve_path(path: str | os.PathLike[str], what: str, base: Path | None = None) -> Path:
    """The absolute path (relative to base, `~` expanded, symlinks followed) a tool's argument names."""
    raw = check_text(os.fspath(path), what)
    try:
        candidate = Path(raw).expanduser()  # "~user/..." of an unknown user raises RuntimeError
        if not candidate.is_absolute() and base is not None:
            candidate = base / candidate
        resolved = candidate.resolve()
        resolved.exists()  # raises for a name too long for the file system, or an unreadable directory
    except (OSError, RuntimeError) as exc:
        raise InvalidInput(f"{what} {raw!r} cannot be resolved: {exc}") from exc
    return resolved


def within(resolved: Path, roots: tuple[Path, ...]) -> bool:
    return any(resolved == root or resolved.is_relative_to(root) for root in roots)


def confine(path: str | os.PathLike[str], roots: tuple[Path, ...], what: str, base: Path | None = None) -> Path:
    """Resolve path (relative to base) and require it to lie under one of roots."""
    resolved = resolve_path(path, what, base)
    if within(resolved, roots):
        return resolved
    listed = ", ".join(str(r) for r in roots)
    raise InvalidInput(
        f"{what} {os.fspath(path)!r} resolves to {resolved}, outside the allowed roots ({listed}). "
        "Move it under the case's repository, or restart the server with --root to allow another directory."
    )


def is_under(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except OSError:
        return False
