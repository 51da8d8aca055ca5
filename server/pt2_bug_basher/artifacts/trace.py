"""trace=True: TORCH_TRACE and tlparse for a collection, its compiles, and the tlparse graphs of each."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from pt2_bug_basher.artifacts.index import TLPARSE_DIR_NAME, TRACE_DIR_NAME, artifact_uri, classify_file
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.execution.runs import ProgressFn
from pt2_bug_basher.execution.tlparse import COMPILE_DIRECTORY, CompileDirectory, run_tlparse

MAX_COMPILES_SHOWN = 8


class CompileInfo(BaseModel):
    compile_id: str
    artifacts: int
    dynamo_graph: str | None = None


class TraceInfo(BaseModel):
    trace_log: str | None = None
    report: str | None = Field(None, description="tlparse's index.html (resource URI)")
    compile_directory: str | None = None
    compiles: list[CompileInfo] = Field(default_factory=list)
    compile_count: int = 0
    tlparse_run_id: str | None = None
    error: str | None = None


async def collect_trace(store: Store, case: CaseRecord, debug_dir: Path, stamp: str, *, tool: str,
                        progress: ProgressFn | None) -> tuple[TraceInfo, CompileDirectory]:
    """Run tlparse on the collection's trace log: what it wrote, and its compile directory (read once)."""
    run = await run_tlparse(store, case, debug_dir / TRACE_DIR_NAME, debug_dir / TLPARSE_DIR_NAME, tool=tool,
                            progress=progress)
    info = TraceInfo(tlparse_run_id=run.run_id)
    if run.log is not None:
        info.trace_log = artifact_uri(case.case_id, f"{stamp}/{run.log.relative_to(debug_dir).as_posix()}")
    if run.error is not None:
        info.error = run.error + ("; the raw trace log is indexed" if run.log is not None else "")
        return info, {}
    tlparse_uri = f"{stamp}/{TLPARSE_DIR_NAME}"
    if run.report is not None:
        info.report = artifact_uri(case.case_id, f"{tlparse_uri}/index.html")
    if (run.out_dir / COMPILE_DIRECTORY).is_file():
        info.compile_directory = artifact_uri(case.case_id, f"{tlparse_uri}/{COMPILE_DIRECTORY}")
    compiles = run.compile_directory()
    listed = []
    for compile_id, artifacts in compiles.items():
        dynamo = next((a.get("url") for a in artifacts if str(a.get("name", "")).startswith("dynamo_output_graph")),
                      None)
        listed.append(CompileInfo(
            compile_id=compile_id, artifacts=len(artifacts),
            dynamo_graph=artifact_uri(case.case_id, f"{tlparse_uri}/{dynamo}") if dynamo else None,
        ))
    info.compile_count = len(listed)
    info.compiles = listed[:MAX_COMPILES_SHOWN]
    return info, compiles


def tlparse_related(compiles: CompileDirectory, case_id: str, stamp: str, compile_id: str, role: str) -> dict[str, str]:
    """tlparse's Dynamo graph and the AOT graph of this role for one compile id ("[0/0]"), as resource URIs.
    (index.json and compile_directory.json list the others: joint, pre- and post-grad graphs.)"""
    wanted = {"dynamo_graph", f"aot_{role}_graph"}
    related: dict[str, str] = {}
    for artifact in compiles.get(compile_id, []):
        name, url = str(artifact.get("name", "")), artifact.get("url")
        kind = classify_file(Path(name))
        if url and kind in wanted and kind not in related:
            related[kind] = artifact_uri(case_id, f"{stamp}/{TLPARSE_DIR_NAME}/{url}")
    return related
