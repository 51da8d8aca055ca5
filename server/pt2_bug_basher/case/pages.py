"""Reading large files in pages (for resources) or by their last bytes (for parsing logs)."""

from __future__ import annotations

import os
from pathlib import Path

from pt2_bug_basher.domain.errors import NotFound

PAGE_BYTES = 64 * 1024


def read_page(path: Path, page: int, uri: str, page_bytes: int = PAGE_BYTES) -> str:
    """Page `page` (from 1) of a file, cut at line boundaries where possible, with a footer naming the next page."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise NotFound(f"{uri}: the file is gone ({exc.strerror or exc})") from exc
    pages = max(1, -(-size // page_bytes))
    if page < 1 or page > pages:
        raise NotFound(f"{uri}: page {page} does not exist; pages run from 1 to {pages}")
    with open(path, "rb") as fh:
        fh.seek((page - 1) * page_bytes)
        data = fh.read(page_bytes)
    text = data.decode("utf-8", errors="replace")
    if pages == 1:
        return text
    footer = f"\n[page {page} of {pages}, {size} bytes in all"
    footer += f"; next: {uri}?page={page + 1}]" if page < pages else "; last page]"
    return text + footer


def read_tail(path: str | os.PathLike[str] | None, limit: int) -> str | None:
    """The last `limit` bytes of a file, decoded leniently; None when there is no file to read."""
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
