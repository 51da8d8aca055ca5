"""Step 8: rerun a repro with TORCH_COMPILE_DEBUG, index what the compiler wrote, locate the failure.

Each collection gets a directory of its own under the case, `<state>/cases/<case_id>/debug/<stamp>/`:

    <stamp>/torch_compile_debug/run_*/torchinductor/<graph>/...   what TORCH_COMPILE_DEBUG wrote
    <stamp>/inductor_cache/...                                      Inductor's cache dir for this run only
    <stamp>/trace/, <stamp>/tlparse/                                TORCH_TRACE and tlparse (trace=True)
    <stamp>/index.json                                              the full, uncapped index

Nothing here depends on the layout of one torch version: the tree is walked, files are classified
by name patterns ("other" when nothing matches), and a directory holding output_code.py,
fx_graph_readable.py or the IR dumps is a compiled graph. Every file is a resource
`case://<case_id>/artifacts/<stamp>/<path>`.

Inductor's cache dir is a new one in the collection, and its FX graph and AOTAutograd caches are off
(a hit would skip codegen and leave a graph directory empty): with the generated modules kept beside
the artifacts, a traceback frame in generated code can be matched to the graph whose output_code.py it
is. TORCHINDUCTOR_FORCE_DISABLE_CACHES is not set: it would also put each compile in a new temporary
directory of its own, where Inductor builds its ISA probes again instead of the machine's copies
(execution/isa_builds.py), about 8 s a run here.
"""


from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.verdict import RunVerdict, run_uri
from pt2_bug_basher.artifacts.accuracy import kernel_origins, load_origins
from pt2_bug_basher.artifacts.graphs import Graph, GraphSummary, compile_ids_from_stderr, load_graph, summarise_graph
from pt2_bug_basher.artifacts.index import (
    CACHE_DIR_NAME,
    INDEX_NAME,
    MAX_WALK_FILES,
    TLPARSE_DIR_NAME,
    TRACE_DIR_NAME,
    IndexedFile,
    WalkResult,
    artifact_uri,
    graph_sort_key,
    new_debug_dir,
    walk,
)
from pt2_bug_basher.artifacts.locate import FailureLocation, locate_failure
from pt2_bug_basher.artifacts.trace import TraceInfo, collect_trace, tlparse_related
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.execution.runs import LAUNCHER, ProgressFn, RunResult, execute
from pt2_bug_basher.execution.tlparse import CompileDirectory

TOOL = "collect_debug_artifacts"
FAILURE_TEXT_BYTES = 4 * 1024 * 1024
# Caps that keep a tool result within a few KB; index.json holds everything.
MAX_GRAPHS_SHOWN = 6
MAX_FILES_SHOWN = 10

# Variables this tool sets for the run; they override the caller's.
DEBUG_ENV = {
    "TORCH_COMPILE_DEBUG": "1",
    "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
    "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
}
# Variables of an earlier run that are not carried into the rerun: this tool decides them.
_NOT_CARRIED = {"TORCH_TRACE", "TORCH_LOGS", "TORCH_COMPILE_DEBUG", "TORCH_COMPILE_DEBUG_DIR",
                "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TORCHINDUCTOR_FX_GRAPH_CACHE",
                "TORCHINDUCTOR_AUTOGRAD_CACHE", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER"}


class ArtifactFile(BaseModel):
    uri: str
    kind: str
    bytes: int


class CollectArtifactsResult(BaseModel):
    case_id: str
    run_id: str
    script: str
    command: list[str]
    env_added: dict[str, str]
    exit: str
    exit_code: int | None = None
    failed: bool
    duration_s: float
    debug_dir: str = Field(description="where the artifacts are on disk")
    index: str = Field(description="resource URI of the full, uncapped index (index.json)")
    graph_count: int
    graphs: list[GraphSummary] = Field(description="capped; the index has them all")
    kernel_count: int
    files_total: int
    nonempty_files: int = Field(0, description="files with content (the index itself not counted)")
    files_by_kind: dict[str, int]
    files: list[ArtifactFile] = Field(description="files with content outside the graph directories (capped); the "
                                                  "empty ones are counted in notes")
    failure: FailureLocation | None = None
    trace: TraceInfo | None = None
    stdout: str
    stderr: str
    recorded: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    next_step: str


@dataclass
class Target:
    """What to rerun: an argv for the case's interpreter, its working directory, the env to carry."""

    argv: list[str]
    cwd: Path
    script: str
    env: dict[str, str] = field(default_factory=dict)
    source: str = ""
    note: str | None = None
    """what the result should say about the script (a copy the case keeps)"""
    launcher: list[str] = field(default_factory=list)
    """the launcher's options the rerun keeps (a rerun of a run the launcher made: its forced backend)"""


def launcher_options(rest: list[str]) -> tuple[list[str], list[str]] | None:
    """(its options, script and arguments) for an argv (after the interpreter) that runs the launcher; the
    options each run sets afresh (`--no-mark`, `--kernel-origins FILE`) left out."""
    if not rest or rest[0] != str(LAUNCHER) or "--" not in rest:
        return None
    end = rest.index("--")
    options, i = [], 1
    while i < end:
        if rest[i] == "--kernel-origins":
            i += 2
            continue
        if rest[i] != "--no-mark":
            options.append(rest[i])
        i += 1
    return options, rest[end + 1:]


def carried_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in _NOT_CARRIED}


_FILE_PRIORITY = ("tlparse_report", "dynamo_debug_log", "aot_debug_log", "trace_log", "compile_directory",
                  "graph_diagram", "log", "other", "index")


def _listed_files(files: Iterable[IndexedFile], case_id: str, stamp: str) -> list[ArtifactFile]:
    loose = [f for f in files
             if f.graph is None and f.size > 0 and not f.rel.startswith(f"{TLPARSE_DIR_NAME}/")]
    rank = {kind: n for n, kind in enumerate(_FILE_PRIORITY)}
    loose.sort(key=lambda f: (rank.get(f.kind, len(rank)), f.rel))
    return [ArtifactFile(uri=artifact_uri(case_id, f"{stamp}/{f.rel}"), kind=f.kind, bytes=f.size)
            for f in loose[:MAX_FILES_SHOWN]]


async def collect(
    store: Store,
    case: CaseRecord,
    target: Target,
    *,
    trace: bool,
    env_add: dict[str, str],
    timeout_s: float,
    progress: ProgressFn | None,
    layer: str | None = None,
) -> CollectArtifactsResult:
    """Rerun the target with TORCH_COMPILE_DEBUG into a new collection directory and index what it wrote.

    `layer`: where localize put the failure, if it ran for the case."""
    debug_dir = new_debug_dir(store, case.case_id)
    stamp = debug_dir.name
    run_env = {**target.env, **env_add, **_debug_env(debug_dir, trace)}
    origins_file = debug_dir / ORIGINS_NAME
    argv = target.argv
    if len(argv) > 1 and not argv[1].startswith("-"):  # a script: the launcher records who generated each line
        argv = [argv[0], str(LAUNCHER), "--no-mark", *target.launcher, "--kernel-origins", str(origins_file), "--",
                *argv[1:]]
    result: RunResult = await execute(store, case, argv, tool=TOOL, cwd=target.cwd, env_add=run_env,
                                      timeout_s=timeout_s, progress=progress,
                                      label=f"{Path(target.script).name} with TORCH_COMPILE_DEBUG")
    outcome = result.outcome
    stderr = result.stderr_text(FAILURE_TEXT_BYTES)
    trace_info, compiles = (await collect_trace(store, case, debug_dir, stamp, tool=TOOL, progress=progress)
                            if trace else (None, {}))

    walked = walk(debug_dir)
    graphs, summaries = _graphs(walked, debug_dir, stderr, compiles, case.case_id, stamp)
    failed, failure = _located_failure(result, stderr, graphs, debug_dir, case.case_id, stamp, layer)
    if failure is not None and failure.output_kernels and (origins := load_origins(origins_file)) is not None:
        for entry in failure.output_kernels:
            graph = next((g for g in graphs if g.name == entry.graph and g.code is not None), None)
            kernel = graph.code.kernel_named(entry.name) if graph is not None and graph.code is not None else None
            if kernel is not None:
                entry.origins = kernel_origins(kernel.body, origins)

    by_kind = Counter(f.kind for f in walked.files)
    if walked.cache_files:
        by_kind["inductor_cache"] = walked.cache_files
    kernel_total = sum(len(g.code.kernels) for g in graphs if g.code)
    notes = _notes(walked, len(summaries), trace, outcome.timed_out, timeout_s, debug_dir)
    index_uri = artifact_uri(case.case_id, f"{stamp}/{INDEX_NAME}")
    collected = CollectArtifactsResult(
        case_id=case.case_id, run_id=result.run_id, script=target.script, command=target.argv,
        env_added={k: v for k, v in result.env_add.items() if k not in ("PYTHONUNBUFFERED", "PYTHONFAULTHANDLER")},
        exit=outcome.describe_exit(), exit_code=outcome.exit_code, failed=failed,
        duration_s=round(outcome.duration_s, 2), debug_dir=str(debug_dir), index=index_uri,
        graph_count=len(summaries), graphs=summaries[:MAX_GRAPHS_SHOWN], kernel_count=kernel_total,
        files_total=len(walked.files) + 1, nonempty_files=sum(1 for f in walked.files if f.size > 0),
        files_by_kind=dict(sorted(by_kind.items())),
        files=_listed_files(walked.files, case.case_id, stamp), failure=failure, trace=trace_info,
        stdout=run_uri(case.case_id, result.run_id, "stdout"), stderr=run_uri(case.case_id, result.run_id, "stderr"),
        notes=notes, next_step="",
    )
    collected.files_by_kind["index"] = collected.files_by_kind.get("index", 0) + 1
    related = {s.name: s.related for s in summaries}
    _write_index(debug_dir, case.case_id, stamp, collected, graphs, related, walked)
    store.set_run_result(result.run_id, {
        "debug_dir": str(debug_dir), "graphs": len(graphs), "kernels": kernel_total, "failed": failed,
        "failure_graph": failure.graph if failure else None, "failure_kernel": failure.kernel if failure else None,
    })
    return collected


ORIGINS_NAME = "kernel_origins.json"


def _debug_env(debug_dir: Path, trace: bool) -> dict[str, str]:
    """The variables this tool sets for the run: TORCH_COMPILE_DEBUG and Inductor's cache into the collection,
    and TORCH_TRACE (its directory made) when `trace`."""
    ours = {**DEBUG_ENV, "TORCH_COMPILE_DEBUG_DIR": str(debug_dir),
            "TORCHINDUCTOR_CACHE_DIR": str(debug_dir / CACHE_DIR_NAME)}
    if trace:
        (debug_dir / TRACE_DIR_NAME).mkdir()
        ours["TORCH_TRACE"] = str(debug_dir / TRACE_DIR_NAME)
    return ours


def _graphs(walked: WalkResult, debug_dir: Path, stderr: str, compiles: CompileDirectory, case_id: str, stamp: str
            ) -> tuple[list[Graph], list[GraphSummary]]:
    """The compiled graphs the run wrote, in order, and their summaries (with tlparse's files of each compile)."""
    compile_ids = compile_ids_from_stderr(stderr)
    graphs = [load_graph(p, debug_dir, compile_ids) for p in sorted(walked.graph_dirs, key=graph_sort_key)]
    summaries = [summarise_graph(g, case_id, stamp) for g in graphs]
    for summary in summaries:
        if summary.compile_id:
            summary.related = tlparse_related(compiles, case_id, stamp, summary.compile_id, summary.role)
    return graphs, summaries


def _located_failure(result: RunResult, stderr: str, graphs: list[Graph], debug_dir: Path, case_id: str,
                     stamp: str, layer: str | None) -> tuple[bool, FailureLocation | None]:
    """Whether the run failed, and where in the artifacts the failure is when it did."""
    outcome = result.outcome
    verdict = RunVerdict(result)
    # A wrong result fails the run even when the script exits 0 after printing the mismatch.
    accuracy = verdict.failed and verdict.classification.category == "accuracy"
    failed = outcome.exit_code != 0 or outcome.timed_out or outcome.signal_name is not None or accuracy
    failure = None
    if failed:
        stdout = result.stdout_text(FAILURE_TEXT_BYTES)
        text = stderr if stderr.strip() else stdout
        failure = locate_failure(text + ("\n" + stdout if accuracy and text is stderr else ""), graphs, debug_dir,
                                 case_id, stamp, outcome.exit_code, outcome.signal_name, accuracy=accuracy,
                                 layer=layer)
    return failed, failure


def _notes(walked: WalkResult, graph_count: int, trace: bool, timed_out: bool, timeout_s: float,
           debug_dir: Path) -> list[str]:
    """What the result leaves out (capped lists, the cache, empty files) and what trace=True would add."""
    notes: list[str] = []
    if walked.truncated:
        notes.append(f"the debug directory holds more than {MAX_WALK_FILES} files; the index stops there")
    if graph_count > MAX_GRAPHS_SHOWN:
        notes.append(f"{graph_count} graphs: the first {MAX_GRAPHS_SHOWN} are shown, index.json lists all")
    if not trace:
        notes.append("trace=True adds TORCH_TRACE and tlparse: Dynamo's graph, the AOT joint/forward/backward "
                     "graphs and the pre/post-grad graphs of each compile")
    if timed_out:
        notes.append(f"the run was killed after the timeout ({timeout_s:.0f}s); what was written until then is indexed")
    if walked.cache_files:
        notes.append(f"{walked.cache_files} files of Inductor's cache for this run (generated modules, C++ sources) "
                     f"are under {debug_dir / CACHE_DIR_NAME}, not listed")
    empty = sorted(f.rel for f in walked.files if f.size == 0 and f.graph is None)
    if empty:
        shown = ", ".join(empty[:4]) + (f" and {len(empty) - 4} more" if len(empty) > 4 else "")
        notes.append(f"{len(empty)} empty file(s) not listed in files (nothing was logged there): {shown}")
    return notes


def _write_index(debug_dir: Path, case_id: str, stamp: str, result: CollectArtifactsResult, graphs: list[Graph],
                 related: dict[str, dict[str, str]], walked: WalkResult) -> None:
    """index.json: everything the result caps, uncapped."""
    full_graphs = []
    for graph in graphs:
        summary = summarise_graph(graph, case_id, stamp, capped=False)
        summary.related = related.get(graph.name, {})
        full_graphs.append(summary.model_dump())
    full = {
        "case_id": case_id, "run_id": result.run_id, "command": result.command, "env_added": result.env_added,
        "exit": result.exit, "debug_dir": str(debug_dir), "graphs": full_graphs,
        "files": [{"uri": artifact_uri(case_id, f"{stamp}/{f.rel}"), "kind": f.kind, "bytes": f.size,
                   "graph": f.graph} for f in walked.files],
        "failure": result.failure.model_dump() if result.failure else None,
        "trace": result.trace.model_dump() if result.trace else None,
    }
    (debug_dir / INDEX_NAME).write_text(json.dumps(full, indent=1))

