"""Step 2 (reproduce), with step 6 through steps/logs.py: run_with_logs runs a repro and records what it proves."""

from __future__ import annotations

from pathlib import Path

import anyio

from pt2_bug_basher.analysis.verdict import USER_ERROR_ADVICE, RunOutcome
from pt2_bug_basher.case.scripts import CaseScript, copy_note
from pt2_bug_basher.case.store import CaseRecord, RunRecord, Store
from pt2_bug_basher.case.workflow import CaseStatus
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import ReproduceEvidence
from pt2_bug_basher.domain.names import USER_ERROR, Step, ToolName
from pt2_bug_basher.execution.gitstate import tree_hash
from pt2_bug_basher.execution.history import blamed_first, change_sentence
from pt2_bug_basher.execution.repro import (
    SILENT_LOGS,
    RunWithLogsResult,
    check_args,
    check_repeat,
    run_repro,
    script_digest,
)
from pt2_bug_basher.execution.runs import ProgressFn, check_env_additions, check_timeout
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.playbooks import layer_of
from pt2_bug_basher.steps import logs as logs_step
from pt2_bug_basher.steps.on_main import run_on_main

WHERE = ("case", "main")


async def run_with_logs(
    state: AppState, case_id: str, script: str, args: list[str] | None = None, logs: str | None = None,
    repeat: int = 2, trace: bool = False, env: dict[str, str] | None = None, cwd: str | None = None,
    timeout_s: float | None = None, where: str = "case", *, progress: ProgressFn | None = None,
) -> RunWithLogsResult:
    """Run the repro `repeat` times; record the reproduction (repeat >= 2) and, after the main check, the logs.
    where="main": run it against the main-check worktree's sources instead, recording no evidence."""
    if where not in WHERE:
        raise InvalidInput(f"where must be 'case' (your tree) or 'main' (the main-check worktree), not {where!r}.")
    flow = await state.gate(ToolName.run_with_logs, case_id)
    case = flow.case
    work_dir = state.confine(case, cwd, "cwd") if cwd else None
    if work_dir is not None and not work_dir.is_dir():
        raise InvalidInput(f"cwd {work_dir} is not a directory.")
    request = logs_step.resolve(case, logs, check_env_additions(env))
    checked_args, runs, timeout = check_args(args), check_repeat(repeat), check_timeout(timeout_s)
    chosen = state.case_script(case, script)  # last: a script from outside is copied only for a call that runs
    script_path = chosen.path
    if where == "main":
        return await run_on_main(state, flow, script_path, args=checked_args, request=request, repeat=runs,
                                 trace=trace, cwd=work_dir, timeout_s=timeout, progress=progress)
    if script_path.is_relative_to((state.store.state_dir / "worktrees").resolve()):
        raise InvalidInput(
            f"{script_path} lies in a worktree of the server, which holds another ref's code: its runs would say "
            "nothing about your tree. Pass the script's path in your repository, and where=\"main\" to run it "
            "against main: "
            + format_call(ToolName.run_with_logs, case_id=case_id, script="<path in the repository>", where="main")
            + "."
        )
    reproduced = flow.latest_ok(Step.reproduce)
    before = reproduced.payload(ReproduceEvidence) if reproduced is not None else None
    rewritten = (runs < 2 and before is not None and before.script_sha256 is not None
                 and Path(before.script).resolve() == chosen.path.resolve()
                 and script_digest(chosen.path) != before.script_sha256)
    result = await run_and_record(
        state.store, case, chosen.path, args=checked_args, logs_spec=request.spec, repeat=runs,
        trace=trace, env_add=request.env, timeout_s=timeout, cwd=work_dir, progress=progress,
        main_check_done=flow.is_complete(Step.main_check), inductor_config=request.inductor_config,
        layer=localized_layer(state.store, case_id), origin=chosen.origin,
    )
    result.next_step = await next_step(state, result, repeat, request.spec, chosen.origin)
    if rewritten:
        changed = (f"{chosen.path.name} is not the file that reproduced: its content changed since the reproduction "
                   "(something rewrote it). This run judges the new content; restore the repro, or make the new "
                   "content the reproduction: "
                   + format_call(ToolName.run_with_logs, case_id=case_id, script=str(chosen.path), repeat=2) + ".")
        result.notes.insert(0, changed)
        result.next_step = changed + " " + result.next_step
    return result


async def run_and_record(
    store: Store, case: CaseRecord, script: Path, *, args: list[str], logs_spec: str | None, repeat: int,
    trace: bool, env_add: dict[str, str], timeout_s: float, cwd: Path | None, progress: ProgressFn | None,
    main_check_done: bool, tool: str = ToolName.run_with_logs.value, inductor_config: dict[str, object] | None = None,
    layer: str | None = None, origin: Path | None = None,
) -> RunWithLogsResult:
    """Run the repro (no gate, inputs already checked) and record the evidence its runs give.

    A reproduction (repeat >= 2) also runs the script with compilation off and, when it exits 0, with logs.
    `origin`: where the script (the case's copy) was copied from."""
    digest = script_digest(script)
    result = await run_repro(store, case, script, args=args, logs_spec=logs_spec, repeat=repeat, trace=trace,
                             env_add=env_add, timeout_s=timeout_s, cwd=cwd, progress=progress, tool=tool,
                             inductor_config=inductor_config, differential=repeat >= 2, layer=layer)
    note = copy_note(CaseScript(script, origin))
    if note:
        result.notes.append(note)
    if result.suspects and case.torch_from_repo:
        # a develop build: say which recent commit changed a frame's function, as localize would
        result.suspects, changes = await anyio.to_thread.run_sync(blamed_first, Path(case.repo), result.suspects)
        result.notes += [change_sentence(c) for c in changes[:1]]
    tree = await anyio.to_thread.run_sync(tree_hash, Path(case.repo)) if result.reproduced else None
    record(store, case, script, args, result, digest, origin, tree)
    logs_step.record(store, case, result, logs_spec, main_check_done)
    return result


def record(store: Store, case: CaseRecord, script: Path, args: list[str], result: RunWithLogsResult,
           digest: str | None = None, origin: Path | None = None, tree: str | None = None) -> None:
    """Two runs or more: a reproduction when all failed with one signature, a failed attempt otherwise.
    `tree`: the repository's tree hash when it reproduced (a later run that passes can say whether it changed).

    A reproduction that fails without torch.compile too stops the case (not a compiler bug) until waived."""
    runs = proving_runs(result)
    n = len(runs)
    source = str(origin) if origin is not None else None
    if n < 2:
        return
    run_ids = [r.run_id for r in runs]
    failures = sum(r.failed for r in runs)
    verdict = result.verdict
    if result.reproduced and result.failure is not None and verdict is not None and verdict.category == USER_ERROR:
        f = result.failure
        off = result.compile_off.run_id if result.compile_off else None
        if verdict.own_backend:
            summary = f"{script.name}: {verdict.advice}: {f.signature or f.category}"
        else:
            summary = (f"{script.name} {USER_ERROR_ADVICE} (run {off} with TORCHDYNAMO_DISABLE=1): "
                       f"{f.signature or f.category}")
        store.add_evidence(case.case_id, Step.reproduce.value, False, summary[:500], run_id=run_ids[0],
                           data=ReproduceEvidence(
                               script=str(script), script_origin=source, args=args, signature=f.signature,
                               category=USER_ERROR, exception_type=f.exception_type, message=f.message,
                               run_ids=[*run_ids, *([off] if off else [])], repeat=n, own_backend=verdict.own_backend))
        return
    if result.reproduced and result.failure is not None:
        f = result.failure
        summary = f"{script.name} failed {n}/{n} times with the same signature ({f.category})" + (
            f": {f.signature}" if f.signature else "")
        store.add_evidence(case.case_id, Step.reproduce.value, True, summary[:500], run_id=run_ids[0], tree_hash=tree,
                           data=ReproduceEvidence(
                               script=str(script), script_origin=source, args=args, signature=f.signature,
                               category=f.category, exception_type=f.exception_type, message=f.message,
                               run_ids=run_ids, repeat=n, script_sha256=digest))
        result.recorded.append(Step.reproduce.value)
        return
    why = (f"failed {failures}/{n} times" if failures != n
           else f"failed every time but with {len({r.signature for r in runs})} different signatures")
    store.add_evidence(case.case_id, Step.reproduce.value, False, f"{script.name} {why}", run_id=run_ids[0],
                       data=ReproduceEvidence(script=str(script), script_origin=source, run_ids=run_ids,
                                              signatures=sorted(str(r.signature) for r in runs)))


def _exited_with_the_failure(evidence: ReproduceEvidence, runs: dict[str, RunRecord]) -> bool:
    """The reproduction's runs ended in the failure (an exit code or a signal): one that showed only in logs
    (graph breaks, recompiles) says nothing of a plain run that passes."""
    ended = [runs[run_id] for run_id in evidence.run_ids if run_id in runs]
    return bool(ended) and all(r.signal or r.exit_code not in (0, None) for r in ended)


def _scripts_of(evidence: ReproduceEvidence) -> set[Path]:
    return {Path(p).resolve() for p in (evidence.script, evidence.script_origin) if p}


async def _passes_after_reproducing(state: AppState, result: RunWithLogsResult, origin: Path | None) -> str | None:
    """A passing run of the script whose failure was reproduced (its path or the file it was copied from): most
    likely the fix holding, not a repro that fails to fail. Says what the case knows of it, and goes on."""
    here = {Path(result.script).resolve(), *([origin.resolve()] if origin else [])}
    runs = {r.run_id: r for r in state.store.runs(result.case_id)}
    reproduced = []
    for record in state.store.evidence(result.case_id, Step.reproduce.value):
        found = record.payload(ReproduceEvidence)
        if record.ok and here & _scripts_of(found) and _exited_with_the_failure(found, runs):
            reproduced.append(record)
    if not reproduced:
        return None
    then = reproduced[-1]

    def case_now() -> tuple[CaseStatus, bool]:  # in a worker thread: one hash of the tree for both
        flow = state.workflow(result.case_id)
        return flow.status(), then.tree_hash is not None and then.tree_hash != flow.tree_hash

    status, changed = await anyio.to_thread.run_sync(case_now)
    said = f"The script passes now; it failed the same way every time when it was reproduced ({then.summary}). "
    if any(s.step == Step.verify and s.status == "done" for s in status.steps):
        why = "run_tests verified the fix on this tree: this is the fix holding where the failure was seen. "
    elif then.tree_hash is None:
        why = ("If torch's sources changed since (a fix), that is the fix holding here; run_tests verifies it. If "
               "nothing changed, the failure depends on something else (inputs, environment, caches). ")
    elif changed:
        why = ("The repository changed since the reproduction: if that change is your fix, it holds here; "
               "run_tests verifies it. ")
    else:
        why = ("Nothing in the repository changed since the reproduction, yet it passes: the failure depends on "
               "something else (inputs, environment, caches, the backend the script picks). ")
    return said + why + f"Next: {status.next_step}"


def proving_runs(result: RunWithLogsResult) -> list[RunOutcome]:
    """The runs the verdict rests on: the logged reruns when only they showed the failure."""
    return result.logged_runs if any(r.failed for r in result.logged_runs) else result.runs


def localized_layer(store: Store, case_id: str) -> str | None:
    """The layer localize put the failure in, if it ran for this case."""
    return layer_of(store.localization(case_id))


async def next_step(state: AppState, result: RunWithLogsResult, repeat: int, spec: str | None,
                    origin: Path | None = None) -> str:
    case_id = result.case_id
    failed = sum(r.failed for r in proving_runs(result))

    def call(**more: object) -> str:
        return format_call(ToolName.run_with_logs, case_id=case_id, script=result.script, **more)

    if result.verdict is not None and result.verdict.category == USER_ERROR and result.reproduced:
        return (await state.status(case_id)).next_step
    if failed == 0 and (passes_now := await _passes_after_reproducing(state, result, origin)):
        return passes_now
    if failed == 0 and result.logged_runs:
        return ("The script did not fail: exit 0, no mismatch reported, and reruns with "
                f"TORCH_LOGS={SILENT_LOGS} showed no graph break and no recompile limit. Check that it runs the "
                "failing configuration (backend, mode, dynamic, device, dtype) and that it raises or asserts on a "
                "wrong result.")
    if failed == 0:
        advice = ("The script did not fail: exit 0, no graph break and no mismatch reported. "
                  "Check that it runs the failing configuration (backend, mode, dynamic, device, dtype) and that "
                  "it raises or asserts on a wrong result.")
        if not spec:
            advice += (" If the problem is graph breaks or recompiles, they only show in logs: "
                       f'{call(logs="graph_break")}.')
        return advice
    if any(r.timed_out for r in result.runs):
        return ("A run hit the timeout and was killed. If the script hangs for real, classify that; otherwise "
                f"raise timeout_s: {call(timeout_s=1800)}.")
    if repeat < 2:
        if Step.logs.value in result.recorded:  # reproduced before: one failing logged run is the logs step
            return (await state.status(case_id)).next_step
        if spec and any(r.ok for r in state.store.evidence(case_id, Step.reproduce.value)):
            status = await state.status(case_id)
            return ("This logged run failed, but logs count for step 6 only once the check on main (step 5) holds "
                    f"for the current test and tree, which it does not now. Next: {status.next_step}")
        return f"It failed once. Confirm it fails the same way every time: {call(repeat=2)}."
    if not result.reproduced:
        return ("The failure is not stable: it failed {}/{} times{}. Look for nondeterminism (random inputs without "
                "a seed, threads, TORCHINDUCTOR_COMPILE_THREADS=1 to serialise compilation), then {}."
                ).format(failed, len(result.runs), "" if result.same_signature else " with different signatures",
                         call(repeat=3))
    status = await state.status(case_id)
    if Step.logs.value in result.recorded or status.next_open != Step.logs:
        return status.next_step
    category = result.failure.category if result.failure else "unknown"
    preset = logs_step.preset_for(category, localized_layer(state.store, case_id))
    return f"Step 6 (collect logs): {call(logs=preset, repeat=1)}"
