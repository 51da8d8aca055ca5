"""The scripts a case runs: in place under the allowed roots, from a copy the case keeps anywhere else.

A repro often lives beside the user's own work, outside the repository under investigation. The
case copies it into its own directory (named by content, so the same file is copied once), runs
the copy, and records where it came from: the case stays reproducible when the original changes.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from pt2_bug_basher.domain.errors import InvalidInput

MAX_SCRIPT_BYTES = 4 * 1024 * 1024
COPIES_DIR = "scripts"


@dataclass(frozen=True)
class CaseScript:
    path: Path
    """what runs: the script itself, or the case's copy of it"""
    origin: Path | None = None
    """where the copy was taken from, when the script lay outside the allowed roots"""


def keep_copy(case_dir: Path, source: Path, what: str = "script") -> Path:
    """Copy a Python script (a resolved path) into the case's directory; the copy's path."""
    return store_copy(case_dir, source.name, read_script(source, what))


def read_script(source: Path, what: str = "script") -> bytes:
    """The contents of a script to copy: a regular .py file of bounded size, with a name no option parser takes."""
    name = source.name
    if name.startswith("-"):
        raise InvalidInput(f"{what} {source}: a name starting with '-' reads as a command-line option; rename it.")
    if source.suffix != ".py":
        raise InvalidInput(f"{what} {source} lies outside the case's repository and the allowed roots, and is not a "
                           "Python script (.py): only a .py file there is run, from a copy the case keeps.")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(source, flags)
    except OSError as exc:
        raise InvalidInput(f"{what} {source} cannot be read: {exc.strerror or exc}.") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory, a FIFO, a device
        os.close(fd)
        raise InvalidInput(f"{what} {source} is not a regular file.")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_SCRIPT_BYTES + 1)
    if len(data) > MAX_SCRIPT_BYTES:
        raise InvalidInput(f"{what} {source} is larger than {MAX_SCRIPT_BYTES // (1024 * 1024)} MiB: a repro "
                           "script is smaller; keep data in files it loads.")
    return data


def store_copy(case_dir: Path, name: str, data: bytes) -> Path:
    """Write a script's contents under the case's directory, in a folder named by their hash."""
    target = case_dir / COPIES_DIR / hashlib.sha256(data).hexdigest()[:16] / name
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{name}.{os.getpid()}.partial")
        partial.write_bytes(data)
        os.replace(partial, target)
    return target


def copy_note(script: CaseScript) -> str | None:
    """What a result says when it ran the case's copy of a script."""
    if script.origin is None:
        return None
    return (f"{script.origin} lies outside the case's repository: the case keeps a copy, {script.path}, and runs "
            "that (later steps default to it). Files beside the original are not copied; edit the original and "
            "pass it again to take a new copy.")
