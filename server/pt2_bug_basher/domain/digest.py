"""Content digests that evidence keeps, to tell later whether a file is still what was checked."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_digest(path: Path) -> str | None:
    """The SHA-256 of the file's content (None when it cannot be read)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
