"""A collection's directory: its layout, resource URIs, and the walk that classifies every file in it."""

from __future__ import annotations

import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from pt2_bug_basher.case.pages import PAGE_BYTES
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.domain.errors import NotFound

DEBUG_DIR_NAME = "debug"
CACHE_DIR_NAME = "inductor_cache"
TRACE_DIR_NAME = "trace"
TLPARSE_DIR_NAME = "tlparse"
INDEX_NAME = "index.json"

MAX_WALK_FILES = 20_000
MAX_PARSE_BYTES = 32 * 1024 * 1024

BINARY_SUFFIXES = {".so", ".o", ".a", ".pyc", ".lock", ".gch", ".pch", ".bin", ".cubin", ".hsaco", ".pt", ".zip",
                   ".tar", ".gz", ".png", ".jpg", ".pkl", ".pickle"}
# A directory holding one of these is a compiled graph's.
GRAPH_FILES = ("output_code.py", "fx_graph_readable.py", "fx_graph_transformed.py", "ir_pre_fusion.txt",
               "ir_post_fusion.txt")


# -- URIs and paths -------------------------------------------------------------------------------


def debug_root(store: Store, case_id: str) -> Path:
    return store.case_dir(case_id) / DEBUG_DIR_NAME


def new_debug_dir(store: Store, case_id: str) -> Path:
    path = debug_root(store, case_id) / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def artifact_uri(case_id: str, rel: str, page: int | None = None) -> str:
    uri = f"case://{case_id}/artifacts/{quote(rel, safe='/-._~')}"
    return f"{uri}?page={page}" if page and page > 1 else uri


def resolve_artifact(store: Store, case_id: str, rel: str) -> Path:
    """The file behind case://<case_id>/artifacts/<rel>; it must lie in the case's debug directory."""
    store.get_case(case_id)
    if not rel or "\x00" in rel:
        raise NotFound("name an artifact: case://<case_id>/artifacts/<path from the tool result>")
    root = debug_root(store, case_id).resolve()
    path = (root / rel).resolve()
    if not path.is_relative_to(root) or path == root:
        raise NotFound(f"artifact {rel!r} is outside the case's debug directory")
    if not path.is_file():
        raise NotFound(f"no artifact {rel!r} in case {case_id}; collect_debug_artifacts lists them "
                       "(and each collection's index.json)")
    return path


def page_of_line(path: Path, line: int) -> int:
    """The resource page (pages.read_page's byte pages) that holds a 1-based line."""
    try:
        with open(path, "rb") as fh:
            offset = 0
            for number, raw in enumerate(fh, start=1):
                if number >= line:
                    break
                offset += len(raw)
    except OSError:
        return 1
    return offset // PAGE_BYTES + 1



def read_text(path: Path, limit: int = MAX_PARSE_BYTES) -> str | None:
    """The start of a file (up to limit bytes), decoded leniently; None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return None


# -- classification and walking ---------------------------------------------------------------------

# Exact names first, then patterns on the file name; the first match wins.
_EXACT: dict[str, str] = {
    "fx_graph_readable.py": "fx_graph",
    "fx_graph_transformed.py": "fx_graph_transformed",
    "fx_graph_runnable.py": "fx_graph_runnable",
    "ir_pre_fusion.txt": "ir_pre_fusion",
    "ir_post_fusion.txt": "ir_post_fusion",
    "output_code.py": "output_code",
    "index.html": "tlparse_report",
    "compile_directory.json": "compile_directory",
    "failures_and_restarts.html": "tlparse_report",
    "chromium_events.json": "trace_events",
    "raw.jsonl": "trace_raw",
    "raw.log": "trace_raw",
    INDEX_NAME: "index",
}
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), k) for p, k in (
    (r"provenance", "provenance"),
    (r"^fx_graph_runnable", "fx_graph_runnable"),
    (r"^dynamo_output_graph", "dynamo_graph"),
    (r"^aot_joint_graph", "aot_joint_graph"),
    (r"^aot_forward_graph", "aot_forward_graph"),
    (r"^aot_backward_graph", "aot_backward_graph"),
    (r"^aot_inference_graph", "aot_inference_graph"),
    (r"^aot_.*graph", "aot_graph"),
    (r"^(before|after)_pre_grad_graph", "pre_grad_graph"),
    (r"^(before_post_grad_graph|inductor_post_grad_graph)", "post_grad_graph"),
    (r"^inductor_output_code", "output_code"),
    (r"guards", "guards"),
    (r"compilation_metrics", "compile_metrics"),
    (r"^dedicated_log_torch_trace.*\.log$", "trace_log"),
    (r"^aot_.*debug\.log$", "aot_debug_log"),
    (r"\.(svg|dot)$", "graph_diagram"),
    (r"\.(log)$", "log"),
))


def classify_file(rel: Path) -> str:
    """The kind of an artifact, from its name and place; "other" when nothing matches."""
    name = rel.name
    parts = rel.parts
    if CACHE_DIR_NAME in parts[:2]:
        return "inductor_cache"
    if name == "debug.log" and "torchdynamo" in parts:
        return "dynamo_debug_log"
    if name in _EXACT:
        return _EXACT[name]
    for pattern, kind in _PATTERNS:
        if pattern.search(name):
            return kind
    if "payloads" in parts:
        return "trace_payload"
    if re.search(r"config_\d+\.txt$", name):
        return "config"
    if parts and parts[0] == TRACE_DIR_NAME:
        return "trace_log"
    return "other"


@dataclass
class IndexedFile:
    rel: str
    kind: str
    size: int
    graph: str | None = None


@dataclass
class WalkResult:
    files: list[IndexedFile] = field(default_factory=list)
    graph_dirs: list[Path] = field(default_factory=list)
    cache_files: int = 0
    truncated: bool = False


def walk(debug_dir: Path) -> WalkResult:
    """Every text file under the collection (symlinks not followed), and the graph directories."""
    result = WalkResult()
    seen = 0
    for dirpath, dirnames, filenames in os.walk(debug_dir, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(debug_dir)
        dirnames.sort()
        if rel_dir.parts[:1] == (CACHE_DIR_NAME,):
            result.cache_files += sum(1 for f in filenames if Path(f).suffix not in BINARY_SUFFIXES)
            continue
        is_graph = any(name in filenames for name in GRAPH_FILES)
        if is_graph and here != debug_dir:
            result.graph_dirs.append(here)
        for name in sorted(filenames):
            seen += 1
            if seen > MAX_WALK_FILES:
                result.truncated = True
                return result
            path = here / name
            if path.is_symlink() or path.suffix in BINARY_SUFFIXES:
                continue
            try:
                size = path.stat().st_size
            except OSError:
                continue
            rel = rel_dir / name
            result.files.append(IndexedFile(rel.as_posix(), classify_file(rel), size,
                                            here.name if is_graph and here != debug_dir else None))
    return result


def graph_sort_key(path: Path) -> tuple[int, float, str]:
    tail = re.search(r"\.(\d+)$", path.name)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = 0.0
    return (int(tail.group(1)) if tail else 1 << 30, mtime, path.name)

