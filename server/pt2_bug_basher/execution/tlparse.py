"""TORCH_TRACE structured logs and tlparse: the one runner (a recorded run) and the one reader of its compile index."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.execution.runs import ProgressFn, execute

TLPARSE_TIMEOUT_S = 300.0
COMPILE_DIRECTORY = "compile_directory.json"
# compile id ("[0/0]") -> its artifacts as tlparse lists them ({"name", "url", ...})
CompileDirectory = dict[str, list[dict[str, Any]]]


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


@dataclass
class TlparseRun:
    """One tlparse run over a trace directory's newest log (or why there was none)."""

    out_dir: Path
    log: Path | None = None
    run_id: str | None = None
    error: str | None = None

    @property
    def report(self) -> Path | None:
        index = self.out_dir / "index.html"
        return index if self.error is None and index.is_file() else None

    def compile_directory(self) -> CompileDirectory:
        return read_compile_directory(self.out_dir / COMPILE_DIRECTORY) if self.error is None else {}


async def run_tlparse(
    store: Store, case: CaseRecord, trace_dir: Path, out_dir: Path, *, tool: str, progress: ProgressFn | None = None,
) -> TlparseRun:
    """Run tlparse (recorded as a run of the case) on the newest TORCH_TRACE log of trace_dir, into out_dir."""
    log = newest_trace_log(trace_dir)
    if log is None:
        return TlparseRun(out_dir, error=f"no trace log was written in {trace_dir}: did the script reach "
                                         "torch.compile?")
    binary = tlparse_binary(case.python)
    if binary is None:
        return TlparseRun(out_dir, log, error="tlparse is not installed (pip install tlparse)")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # tlparse 0.4.3 refuses a directory and --latest: it gets the log file itself; -p writes plain text.
    result = await execute(store, case, [binary, str(log), "-o", str(out_dir), "--overwrite", "--no-browser", "-p"],
                           tool=tool, cwd=out_dir.parent, timeout_s=TLPARSE_TIMEOUT_S, progress=progress,
                           label="tlparse")
    run = TlparseRun(out_dir, log, run_id=result.run_id)
    if result.outcome.exit_code != 0:
        run.error = f"tlparse failed ({result.outcome.describe_exit()}): {result.stderr_text(4000).strip()[-500:]}"
    return run


def read_compile_directory(path: Path) -> CompileDirectory:
    """tlparse's compile_directory.json: each compile id ("[0/0]") with its artifacts ({"name", "url", ...}).

    The "[-/-]" entry (artifacts of no compile) and malformed entries are left out."""
    try:
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    compiles: CompileDirectory = {}
    for compile_id, info in data.items():
        if compile_id == "[-/-]" or not isinstance(info, dict):
            continue
        artifacts = info.get("artifacts", [])
        compiles[str(compile_id)] = [a for a in artifacts if isinstance(a, dict)] if isinstance(artifacts, list) else []
    return compiles


def compile_entries(compiles: CompileDirectory) -> list[CompileEntry]:
    """Each compile's outcome, told by the names of its artifacts."""
    entries = []
    for compile_id, artifacts in compiles.items():
        names = [str(a.get("name", "")) for a in artifacts]
        errors = [n for n in names if n.startswith(("dynamo_error", "inductor_error")) or "failure" in n]
        breaks = [n for n in names if n.startswith("dynamo_graph_break_reason")]
        if errors:
            status, detail = "failed", errors[0]
        elif breaks:
            status, detail = "graph break", breaks[0]
        else:
            status, detail = "ok", None
        entries.append(CompileEntry(compile_id=compile_id, status=status, detail=detail))
    return entries


def trace_summary(run: TlparseRun) -> TraceSummary:
    """run_with_logs' view of a tlparse run: the report and each compile's outcome."""
    summary = TraceSummary(trace_log=str(run.log) if run.log else None, error=run.error)
    if run.error is not None:
        return summary
    summary.report = str(run.report) if run.report else None
    summary.compiles = compile_entries(run.compile_directory())
    summary.failed_compiles = sum(1 for c in summary.compiles if "fail" in c.status)
    summary.broken_compiles = sum(1 for c in summary.compiles if "break" in c.status)
    return summary
