"""Step 8 (artifacts): rerun the repro with TORCH_COMPILE_DEBUG and index graphs, IR and generated code."""

from __future__ import annotations

from pathlib import Path

from pt2_bug_basher.analysis.verdict import run_uri
from pt2_bug_basher.artifacts.accuracy import NAMED_ITEM
from pt2_bug_basher.artifacts.collect import CollectArtifactsResult, Target, carried_env, collect, launcher_options
from pt2_bug_basher.artifacts.locate import FailureLocation
from pt2_bug_basher.case.scripts import copy_note
from pt2_bug_basher.case.store import CaseRecord
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import ArtifactsEvidence, LogsEvidence, ReproduceEvidence
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.repro import check_args
from pt2_bug_basher.execution.runs import ProgressFn, check_env_additions, check_timeout
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.playbooks import blind_spot, layer_of, present_in
from pt2_bug_basher.steps.reproduce import localized_layer


async def collect_debug_artifacts(
    state: AppState, case_id: str, script: str | None = None, run_id: str | None = None,
    args: list[str] | None = None, trace: bool = False, env: dict[str, str] | None = None,
    timeout_s: float | None = None, *, progress: ProgressFn | None = None,
) -> CollectArtifactsResult:
    """Rerun a script, an earlier run or the case's reproduction with TORCH_COMPILE_DEBUG; record what it wrote."""
    flow = await state.gate(ToolName.collect_debug_artifacts, case_id)
    case = flow.case
    target = resolve_target(state, case, script, run_id, check_args(args) if args else None)
    result = await collect(
        state.store, case, target, trace=trace, env_add=check_env_additions(env),
        timeout_s=check_timeout(timeout_s), progress=progress, layer=localized_layer(state.store, case.case_id),
    )
    if target.note:
        result.notes.append(target.note)
    ok, summary, data = evidence_summary(result)
    state.store.add_evidence(case.case_id, Step.artifacts.value, ok, summary, data=data, run_id=result.run_id)
    result.recorded.append(Step.artifacts.value)
    result.next_step = await next_step(state, result, ok, reproduced=flow.is_complete(Step.reproduce))
    return result


def resolve_target(
    state: AppState, case: CaseRecord, script: str | None, run_id: str | None, args: list[str] | None,
) -> Target:
    """The command to rerun: the given script, an earlier run's command, or the case's reproduction."""
    if script and run_id:
        raise InvalidInput("pass script or run_id, not both: run_id reruns that run's own script.")
    if script:
        chosen = state.case_script(case, script)
        path = chosen.path
        return Target([case.python, str(path), *(args or [])], path.parent, str(path), source="script",
                      note=copy_note(chosen))
    if run_id:
        run = state.store.get_run(run_id, case.case_id)
        argv = list(run.argv)
        if len(argv) < 2 or argv[0] != case.python:
            raise InvalidInput(
                f"run {run_id} did not run a script with the case's Python ({case.python}): it ran "
                f"{' '.join(argv[:3])[:200]}. Pass the run of a repro script, or script=\"<repro.py>\"."
            )
        rest = argv[1:]
        launched = launcher_options(rest)
        if launched is not None and launched[1]:  # the launcher ran it: rerun its script, with its options
            options, rest = launched
        else:
            options = []
        if rest[0].startswith("-"):
            # `python -m pytest ...` or similar, recorded by this server: rerun it as it was.
            if args:
                raise InvalidInput(f"run {run_id} ran `python {rest[0]} ...`, not a script: args cannot replace "
                                   "its arguments; pass script=... instead.")
            command, shown = [case.python, *rest], " ".join(rest[:2])
            cwd = _cwd(state, case, run.cwd, Path(case.repo))
        else:
            # a recorded run's script is rerun where it was: never copied from outside the roots
            path = state.script_file(case, rest[0], f"the script of run {run_id}", copy_outside=False)
            command = [case.python, str(path), *(args if args is not None else rest[1:])]
            shown = str(path)
            cwd = _cwd(state, case, run.cwd, path.parent)
        return Target(command, cwd, shown, env=carried_env(run.env), source=f"run {run_id}", launcher=options)
    records = state.store.evidence(case.case_id, Step.reproduce.value)
    scripted = [p for p in (r.payload(ReproduceEvidence) for r in records) if p.script]
    if not scripted:
        raise InvalidInput(
            "no script to rerun: pass script=\"<repro.py>\" or run_id=\"<run>\" (the case has no reproduction "
            "on record; step 2 is "
            f"{format_call(ToolName.run_with_logs, case_id=case.case_id, script='<repro.py>', repeat=2)})."
        )
    repro = scripted[-1]
    # the repro the agent ran last (a reduced one a logged run ran) is the case's current one
    current = state.workflow(case.case_id).current_script() or repro.script
    chosen = state.case_script(case, current, "the case's reproduction script")
    path = chosen.path
    repro_args = args if args is not None else (list(repro.args) if current == repro.script else [])
    return Target([case.python, str(path), *repro_args], path.parent, str(path), source="reproduction",
                  note=copy_note(chosen))


def _cwd(state: AppState, case: CaseRecord, cwd: str, fallback: Path) -> Path:
    try:
        path = state.confine(case, cwd, "cwd")
    except InvalidInput:
        return fallback
    return path if path.is_dir() else fallback


def evidence_summary(result: CollectArtifactsResult) -> tuple[bool, str, ArtifactsEvidence]:
    """The step holds when the compiler wrote something to look at."""
    ok = result.graph_count > 0 or result.nonempty_files > 0
    where = ""
    if result.failure and (result.failure.graph or result.failure.kernel):
        where = f"; failure in graph {result.failure.graph}" + (
            f", kernel {result.failure.kernel}" if result.failure.kernel else "")
    summary = (f"TORCH_COMPILE_DEBUG: {result.graph_count} graphs, {result.kernel_count} kernels, "
               f"{result.files_total} files ({result.exit}){where}")
    if not ok:
        summary = f"TORCH_COMPILE_DEBUG wrote no artifacts ({result.exit})"
    data = ArtifactsEvidence(
        debug_dir=result.debug_dir, index=result.index, run_id=result.run_id, script=result.script,
        graphs=result.graph_count, kernels=result.kernel_count, files=result.files_total, failed=result.failed,
        failure_graph=result.failure.graph if result.failure else None,
        failure_kernel=result.failure.kernel if result.failure else None,
    )
    return ok, summary[:500], data


async def next_step(state: AppState, result: CollectArtifactsResult, ok: bool, *, reproduced: bool = True) -> str:
    after = (await state.status(result.case_id)).next_step
    traced = format_call(ToolName.collect_debug_artifacts, case_id=result.case_id, run_id=result.run_id, trace=True)
    if not ok:
        return ("TORCH_COMPILE_DEBUG wrote nothing: the script may not reach torch.compile with the Inductor backend, "
                "or it fails before Inductor (Dynamo, AOTAutograd). Check stderr "
                f"({result.stderr}); for Dynamo/AOT failures use run_with_logs with a logs preset or {traced}.")
    outside = _outside_graph(state, result.case_id)
    if outside is not None:
        return f"{outside} Then: {after}"
    failure = result.failure
    suspect = _first_suspect(state, result.case_id)
    if failure is not None and failure.accuracy and failure.output_kernels:
        return _accuracy_next_step(result, failure, after, reproduced, suspect)
    if failure is not None and (failure.kernel or failure.graph):
        where = f"kernel {failure.kernel} of graph {failure.graph}" if failure.kernel else f"graph {failure.graph}"
        graph_dir = next((g.dir_uri for g in result.graphs if g.name == failure.graph), None)
        read = failure.output_code or graph_dir or ""
        line = f" (line {failure.output_code_line})" if failure.output_code_line else ""
        nodes = f"; it computes the FX nodes {', '.join(failure.fx_nodes[:8])}" if failure.fx_nodes else ""
        fx = f", compared with {graph_dir}fx_graph_transformed.py and ir_post_fusion.txt" if graph_dir else ""
        find = (f"{suspect}: start there, it is what produced this code." if suspect else
                "Find which lowering or codegen produced the wrong code.")
        return (f"The failure ({failure.phase or 'unknown phase'}) is in {where}: read {read}{line}{nodes}{fx}. "
                f"{find} Then: {after}")
    if failure is not None and result.graph_count == 0:
        return _nothing_reached_inductor(state, result, failure, after)
    if failure is not None and failure.localized == "Inductor":
        return (f"No traceback frame or compiler error points into generated code, but localize found only "
                f"backend='inductor' failing ({failure.how}). Read the graphs ({result.index}): their "
                f"output_code.py, fx_graph_transformed.py and ir_post_fusion.txt, and the stderr ({result.stderr}). "
                f"Then: {after}")
    if failure is not None:
        return (f"The failure is not in generated code ({failure.how}). Read the graphs ({result.index}) to see "
                f"what reached Inductor, and the stderr ({result.stderr}). Then: {after}")
    return (f"The run passed with TORCH_COMPILE_DEBUG ({result.exit}); the artifacts show the compiled code, but "
            "not the failure: check the script runs the failing configuration. Then: " + after)


def _outside_graph(state: AppState, case_id: str) -> str | None:
    """For a case whose bug lies outside the compiled graph (its outputs match eager): why no artifact shows it,
    and the files to read instead (those the checkout has)."""
    flow = state.workflow(case_id)
    spot = blind_spot(flow.category(), layer_of(flow.localization))
    if spot is None:
        return None
    choice = present_in(Path(flow.case.repo), spot.source_files)
    files = choice.present or [f"{choice.upstream} (upstream PyTorch; not in this checkout)"]
    return (f"{spot.note} None of these artifacts shows the fault: the generated code computes the graph, whose "
            f"outputs match eager. Read {', '.join(files)}.")


def _first_suspect(state: AppState, case_id: str) -> str | None:
    """localize's first suspect, in words (None: localize has not named one)."""
    record = state.store.localization(case_id)
    if record is None or not record.suspects:
        return None
    top = record.suspects[0]
    where = f"{top.file}:{top.line}" if top.line else top.file
    why = _short_why(top.why)
    text = f"localize's first suspect is {top.function} at {where} ({why})"
    codegen = [s.function for s in record.suspects[1:] if "/codegen/" in s.file]
    if codegen:
        text += (f"; the code generation that ran only with that op lowered ({', '.join(codegen[:8])}) writes the "
                 "kernel's text, so match the bad line to the one that prints it")
    return text


def _short_why(why: str, limit: int = 200) -> str:
    """A suspect's reasons cut at whole clauses: the first, and the commit that changed it when one did."""
    clauses = why.split("; ")
    kept = [clauses[0], *(c for c in clauses[1:] if c.startswith("changed by "))]
    text = "; ".join(kept)
    return text if len(text) <= limit or len(kept) == 1 else clauses[0]


# What to read, in order, when no graph reached Inductor: what Dynamo wrote, then the rest.
_READ_WITHOUT_GRAPHS = ("guards", "dynamo_debug_log", "dynamo_graph", "aot_debug_log", "trace_log", "log")


def _nothing_reached_inductor(state: AppState, result: CollectArtifactsResult, failure: FailureLocation,
                              after: str) -> str:
    """No graph was indexed (backend='eager', or the failure came before a backend): name what was collected."""
    rank = {kind: n for n, kind in enumerate(_READ_WITHOUT_GRAPHS)}
    written = sorted((f for f in result.files if f.bytes > 0 and f.kind in rank), key=lambda f: rank[f.kind])
    read = [f"{f.uri} ({f.kind.replace('_', ' ')})" for f in written[:3]]
    text = (f"No graph reached Inductor (0 graphs indexed), so there is no generated code to read "
            f"({failure.how}). Read {', '.join(read) + ' and ' if read else ''}the run's stderr ({result.stderr}).")
    if failure.localized and failure.localized.startswith("Dynamo"):
        located = state.store.localization(result.case_id)
        text += (" The bug is in Dynamo: read the source localize's suspects name" if located and located.suspects
                 else " The bug is in Dynamo, and localize named no function: read the side effects and guards"
                      " Dynamo logged")
        logs = next((r for r in reversed(state.store.evidence(result.case_id, Step.logs.value)) if r.ok), None)
        found = logs.payload(LogsEvidence) if logs is not None else None
        if found is not None and found.run_ids and "guards" in (found.logs or ""):
            text += (f", against the guards of each compiled entry in the logs run's stderr "
                     f"({run_uri(result.case_id, found.run_ids[0], 'stderr')})")
        text += "."
    return f"{text} Then: {after}"


def _accuracy_next_step(result: CollectArtifactsResult, failure: FailureLocation, after: str, reproduced: bool,
                        suspect: str | None) -> str:
    """A wrong result: read the code of the kernels that write the output, against the ops they fuse."""
    writers = [k for k in failure.output_kernels if k.role.startswith("writes")] or failure.output_kernels
    first = writers[0]
    graph_dir = next((g.dir_uri for g in result.graphs if g.name == first.graph), None)
    item_named = any(k.role.endswith(NAMED_ITEM) for k in failure.output_kernels)
    which = f"output {failure.mismatched_output}" if item_named else "the graph outputs"
    named = "; ".join(f"{k.name} ({', '.join(k.aten_ops) or 'ops not recorded'})" for k in writers)
    fed = [k.name for k in failure.output_kernels if k not in writers]
    feeders = f", fed by {', '.join(fed)}" if fed else ""
    beside = (f" and, in {graph_dir}, fx_graph_transformed.py (the post-grad graph) and ir_post_fusion.txt "
              "(each kernel's loop body)") if graph_dir else ""
    if failure.localized and failure.localized != "Inductor":
        # the wrong values come from before Inductor: its kernels only carry them, so its graphs come first
        graph = (f"fx_graph_transformed.py in {graph_dir} (the graph Inductor received, after decompositions and "
                 "passes)") if graph_dir else "the graph Inductor received"
        return (f"A wrong result, which localize put in {failure.localized}, before Inductor: {named} only carry "
                f"the wrong values. Read {graph} for the ops that compute {which}, against what they compute in "
                f"eager; collect_debug_artifacts with trace=True shows the earlier graphs. Then: {after}")
    verb = "is" if item_named else "are"
    text = (f"A wrong result: {which} of graph {first.graph} {verb} written by {named}{feeders}. "
            f"Read {first.output_code} line {first.line or first.call_line} (excerpts in failure.output_kernels)"
            f"{beside}, and check each "
            "line of the kernel against what its ops compute in eager. ")
    if failure.localized == "Inductor" and suspect:
        text += f"localize found only backend='inductor' wrong, and {suspect}. "
    elif failure.localized == "Inductor":
        text += "localize found only backend='inductor' wrong: find the lowering or codegen that emits the bad line. "
    elif reproduced:
        text += f"Confirm that only Inductor is wrong with {format_call(ToolName.localize, case_id=result.case_id)}. "
    else:
        reproduce = format_call(ToolName.run_with_logs, case_id=result.case_id, script=result.script, repeat=2)
        text += (f"Confirm that only Inductor is wrong: reproduce it ({reproduce}), then "
                 f"{format_call(ToolName.localize, case_id=result.case_id)}. ")
    return text + f"Then: {after}"
