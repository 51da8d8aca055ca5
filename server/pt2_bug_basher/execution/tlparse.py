"""TORCH_TRACE structured logs and tlparse: run it non-interactively, read its compile index."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from pt2_bug_basher.execution.runner import run_captured

TLPARSE_TIMEOUT_S = 300.0


class CompileEntry(BaseModel):
    compile_id: str
    status: str = Field(description="what tlparse says of this compile (ok, failed, graph break, ...)")
    detail: str | None = None


class TraceSummary(BaseModel):
    trace_log: str | None = None
    report: str | None = Field(None, description="tlparse's index.html")
    compiles: list[CompileEntry] = Field(default_factory=list)
    failed_compiles: int = 0
    broken_compiles: int = 0
    error: str | None = None


def tlparse_binary(python: str | None = None) -> str | None:
    """tlparse beside the case's interpreter, else beside the server's, else on PATH."""
    for directory in (Path(python).parent if python else None, Path(sys.executable).parent):
        if directory is not None and (directory / "tlparse").is_file() and os.access(directory / "tlparse", os.X_OK):
            return str(directory / "tlparse")
    return shutil.which("tlparse")


def newest_trace_log(trace_dir: Path) -> Path | None:
    if not trace_dir.is_dir():
        return None
    logs = [p for p in trace_dir.glob("*.log") if p.is_file() and p.stat().st_size > 0]
    return max(logs, key=lambda p: p.stat().st_mtime) if logs else None


async def run_tlparse(trace_dir: Path, out_dir: Path, scratch: Path) -> TraceSummary:
    log = newest_trace_log(trace_dir)
    if log is None:
        return TraceSummary(error=f"no trace log was written in {trace_dir}: did the script reach torch.compile?")
    binary = tlparse_binary()
    if binary is None:
        return TraceSummary(trace_log=str(log), error="tlparse is not installed (pip install tlparse)")
    # tlparse 0.4.3 refuses a directory and --latest here: it gets the log file itself.
    captured = await run_captured(
        [binary, str(log), "-o", str(out_dir), "--overwrite", "--no-browser"],
        cwd=scratch, env=dict(os.environ), timeout_s=TLPARSE_TIMEOUT_S, scratch_dir=scratch,
    )
    summary = TraceSummary(trace_log=str(log))
    if captured.outcome.exit_code != 0:
        summary.error = f"tlparse failed ({captured.outcome.describe_exit()}): {captured.stderr.strip()[-500:]}"
        return summary
    index = out_dir / "index.html"
    summary.report = str(index) if index.exists() else None
    summary.compiles = parse_compile_directory(out_dir / "compile_directory.json")
    summary.failed_compiles = sum(1 for c in summary.compiles if "fail" in c.status)
    summary.broken_compiles = sum(1 for c in summary.compiles if "break" in c.status)
    return summary


def parse_compile_directory(path: Path) -> list[CompileEntry]:
    """compile_directory.json maps each compile id ("[0/0]") to its artifacts; the names tell the outcome."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    entries = []
    for compile_id, info in data.items():
        if compile_id == "[-/-]":
            continue
        artifacts = info.get("artifacts", []) if isinstance(info, dict) else []
        names = [str(a.get("name", "")) for a in artifacts if isinstance(a, dict)]
        errors = [n for n in names if n.startswith(("dynamo_error", "inductor_error")) or "failure" in n]
        breaks = [n for n in names if n.startswith("dynamo_graph_break_reason")]
        if errors:
            status, detail = "failed", errors[0]
        elif breaks:
            status, detail = "graph break", breaks[0]
        else:
            status, detail = "ok", None
        entries.append(CompileEntry(compile_id=str(compile_id), status=status, detail=detail))
    return entries
