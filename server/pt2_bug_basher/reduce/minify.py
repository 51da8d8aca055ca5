"""minify: pick the reducer, run it within the budget, confirm the result, record the step."""

from __future__ import annotations

import ast
import re
import shutil
import time
from pathlib import Path

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.compare import (
    CANDIDATE,
    EXPORT_CANDIDATE,
    TRIAL,
    Match,
    Rules,
    describe,
    run_failure,
)
from pt2_bug_basher.analysis.verdict import uses_export
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import BugBasherError, InvalidInput, NotFound
from pt2_bug_basher.domain.evidence import ReduceEvidence
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.cpus import usable_cpus
from pt2_bug_basher.execution.repro import COMPILE_OFF_ENV
from pt2_bug_basher.execution.runs import LAUNCHER, RunResult, execute
from pt2_bug_basher.execution.warm import WarmRequest
from pt2_bug_basher.playbooks import EXPORT, PLAYBOOKS, reducer_for
from pt2_bug_basher.reduce import minimal
from pt2_bug_basher.reduce.ladder import Reference, run_timeout

MODES = ("auto", "fx", "source")
AFTERS = ("aot", "dynamo")
MIN_BUDGET_S = 5.0
MAX_BUDGET_S = 4 * 3600.0
# Categories whose failure sits on a captured graph: the FX minifier, after the layer the table names.
_FX_CATEGORIES = {c: p.minify.after or "aot" for c, p in PLAYBOOKS.items() if p.minify.mode == "fx"}


class ReducerStatsOut(BaseModel):
    evaluator: str
    candidates_run: int
    cached: int
    rejected_without_running: int
    evaluations_per_s: float
    phases: list[str]


class FxDetails(BaseModel):
    after: str
    level: int
    launcher: str | None = None
    check_str: str | None = None
    trials: int = 0
    trial_seconds: float = 0.0
    minifier_log: list[str] = Field(default_factory=list, description="the minifier's last progress lines")
    trial_output: str | None = Field(None, description="what an isolated trial printed, when a step failed")
    problem: str | None = None


class MinifyResult(BaseModel):
    case_id: str
    mode: str
    why_mode: str
    script: str
    minimized_path: str | None = None
    resource: str | None = None
    before: dict[str, int] = Field(default_factory=dict, description="size before: lines/bytes/statements or nodes")
    after: dict[str, int] = Field(default_factory=dict)
    confirmed: bool = Field(False, description="the reduced repro, run alone in a separate process, fails the "
                                                "case's way after a compiled call (and, where the case passed "
                                                "with compilation off, does not fail that way with it off)")
    comparison: str | None = Field(None, description="signature, exception or category: how it matched")
    minimized_failure: str | None = None
    confirm_run_id: str | None = None
    helped: bool = False
    already_minimal: bool = Field(False, description=(
        "mode='auto' judged the script minimal from its source (statements, ops in the compiled code): "
        "nothing was reduced, and it was confirmed to fail the case's way"))
    budget_s: float = Field(description="the seconds the reducer was given; 0 when nothing was reduced")
    budget_exhausted: bool = False
    seconds: float
    source: ReducerStatsOut | None = None
    fx: FxDetails | None = None
    recorded: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    next_step: str


def check_mode(mode: str, after: str) -> None:
    if mode not in MODES:
        raise InvalidInput(f"mode must be one of {', '.join(MODES)}, not {mode!r}.")
    if after not in AFTERS:
        raise InvalidInput(f"after must be 'aot' or 'dynamo', not {after!r}.")


def check_budget(budget_s: float | None) -> float:
    if budget_s is None:
        return 600.0
    if not (MIN_BUDGET_S <= budget_s <= MAX_BUDGET_S):
        raise InvalidInput(f"budget_s must be between {MIN_BUDGET_S:.0f} and {MAX_BUDGET_S:.0f} seconds.")
    return float(budget_s)


def candidate_rules(store: Store, case: CaseRecord, ref: Reference, source: str) -> Rules:
    """How a reduced candidate is judged: EXPORT_CANDIDATE where the script reaches the compiler through
    torch.export alone (localize's ladder found no call of its to swap; without a localisation, its source
    calls export and neither torch.compile nor optimize), else CANDIDATE."""
    loc = store.localization(case.case_id)
    if loc is not None and loc.signature == ref.signature:
        return EXPORT_CANDIDATE if loc.layer == EXPORT else CANDIDATE
    if uses_export(source) and not any(call in source for call in ("compile(", "optimize(")):
        return EXPORT_CANDIDATE
    return CANDIDATE


def pick_mode(store: Store, case: CaseRecord, ref: Reference) -> tuple[str, str, str]:
    """(mode, after, why) for mode='auto'."""
    loc = store.localization(case.case_id)
    if loc is not None and loc.signature == ref.signature and loc.first_failing:
        mode, after = reducer_for(ref.category, loc.layer)
        fits = f"PyTorch's minifier after {after}" if mode == "fx" else "the source reducer (the FX minifier " \
                                                                       "cannot see it)"
        return mode, after, f"localize: a {ref.category} in {loc.layer} (first fails at {loc.first_failing}), so {fits}"
    if ref.category in _FX_CATEGORIES and not (ref.signature or "").startswith("SIG"):
        return "fx", _FX_CATEGORIES[ref.category], f"category {ref.category}: a backend failure on a captured graph"
    return "source", "aot", f"category {ref.category}: the FX minifier does not apply (no failing backend graph)"


def _out_dir(store: Store, case_id: str) -> Path:
    path = store.case_dir(case_id) / "minified"
    path.mkdir(parents=True, exist_ok=True)
    return path


def resource_uri(case_id: str, path: Path) -> str:
    return f"case://{case_id}/minified/{path.name}"


def minified_file(store: Store, case_id: str, name: str) -> Path:
    """The reduced repro named `name` that minify wrote for the case (the file behind its resource URI)."""
    store.get_case(case_id)
    if "/" in name or "\\" in name or name.startswith("."):
        raise NotFound(f"no minified repro named {name!r}")
    path = store.case_dir(case_id) / "minified" / name
    if not path.is_file():
        raise NotFound(f"no minified repro named {name!r} in case {case_id}")
    return path


async def run_minify(store: Store, case: CaseRecord, ref: Reference, script: Path, *, mode: str, after: str,
                     budget_s: float, progress, cwd: Path | None = None) -> MinifyResult:
    started = time.monotonic()
    why = f"mode={mode} was asked for"
    judged_note = None
    polish_s: float | None = None  # a small repro's source reduction only polishes it
    picked = mode == "auto"  # the mode was chosen here: a failed FX minifier may fall back to the source reducer
    if picked:
        judged = minimal.judge(script.read_text(errors="replace"))
        if judged.minimal:
            done = await _already_minimal(store, case, ref, script, judged, progress, cwd)
            done.seconds = round(time.monotonic() - started, 1)
            _record(store, case, done)
            done.next_step = _next_step(case.case_id, done, localized=store.localization(case.case_id) is not None)
            return done
        judged_note = f"not already minimal: {judged.why_not}"
        mode, after, why = pick_mode(store, case, ref)
        polish_s = judged.polish_budget_s if judged.small else None
        if mode == "source" and judged.small:
            budget_s = min(budget_s, judged.polish_budget_s)
            judged_note += (f"; small already ({judged.describe()}), so the source reducer only polishes it: "
                            f"statements, one-expression helpers and constants, within {budget_s:.0f} s "
                            "(mode=\"source\" runs every pass, the expression-level one too, with the whole budget)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = store.case_dir(case.case_id) / "minify" / f"{mode}-{stamp}-{time.monotonic_ns() % 10**6}"
    result = MinifyResult(case_id=case.case_id, mode=mode, why_mode=why, script=str(script), budget_s=budget_s,
                          seconds=0.0, next_step="")
    polish = polish_s is not None
    if mode == "fx":
        await _fx(store, case, ref, script, after, budget_s, progress, work, result)
        remaining = budget_s - (time.monotonic() - started)
        if polish_s is not None:
            remaining = min(remaining, polish_s)
        if not result.confirmed and picked and remaining > 30:
            result.notes.append(f"the FX minifier gave no confirmed repro; falling back to the source reducer "
                                f"with the remaining {remaining:.0f} s"
                                + (" (the repro is small: a polish of statements, one-expression helpers and "
                                   "constants)" if polish else ""))
            fx = result.fx
            result = MinifyResult(case_id=case.case_id, mode="source", why_mode=why + "; FX minifier did not help",
                                  script=str(script), budget_s=budget_s, seconds=0.0, next_step="", fx=fx,
                                  notes=list(result.notes))
            await _source(store, case, ref, script, remaining, progress, work.with_name(work.name + "-src"),
                          result, cwd, polish=polish)
    else:
        await _source(store, case, ref, script, budget_s, progress, work, result, cwd, polish=polish)
    if judged_note:
        result.notes.insert(0, judged_note)
    result.seconds = round(time.monotonic() - started, 1)
    _record(store, case, result)
    result.next_step = _next_step(case.case_id, result, localized=store.localization(case.case_id) is not None)
    return result


async def _already_minimal(store: Store, case: CaseRecord, ref: Reference, script: Path, judged: minimal.Minimality,
                           progress, cwd: Path | None) -> MinifyResult:
    """A script judged minimal from its source: confirm it fails the case's way (the reproduction's runs,
    when it is the reproduced script unchanged; else one fresh run), and reduce nothing."""
    from pt2_bug_basher.execution.repro import script_digest
    from pt2_bug_basher.reduce.source import size_of

    source = script.read_text(errors="replace")
    sizes = {**size_of(source), **judged.sizes()}
    why = f"already minimal: {judged.describe()}; no reduction attempted"
    loc = store.localization(case.case_id)
    if loc is not None and loc.signature == ref.signature and loc.first_failing:
        why += f"; localize: it first fails with backend={loc.first_failing} ({loc.layer or 'layer unknown'})"
    result = MinifyResult(case_id=case.case_id, mode="none", why_mode=why, script=str(script), budget_s=0.0,
                          seconds=0.0, next_step="", before=sizes, after=dict(sizes), already_minimal=True)
    unchanged = script.resolve() == ref.script.resolve() and ref.script_sha256 is not None \
        and script_digest(script) == ref.script_sha256
    if unchanged and ref.run_ids:
        result.confirmed, result.comparison = True, "signature"
        result.minimized_failure, result.confirm_run_id = ref.signature, ref.run_ids[0]
        result.notes.append(f"the reproduction's runs ({', '.join(ref.run_ids)}) ran this very script and failed "
                            "the case's way every time")
    else:
        await progress("already minimal: confirming it fails the case's way in a fresh process")
        confirm, match = await confirm_run(store, case, ref, script, TRIAL, cwd=cwd or script.parent,
                                           progress=progress, label="confirm run (already minimal)")
        seen = run_failure(confirm)
        result.confirmed, result.comparison = match.matches, match.level
        result.minimized_failure, result.confirm_run_id = describe(seen), confirm.run_id
        if match.matches:
            result.notes.append(f"run {confirm.run_id} of this script alone fails the case's way ({match.reason})")
        else:
            result.notes.append(f"the script is minimal, but run alone it does not fail the case's way: {match.reason}")
    if result.confirmed:
        result.minimized_path = str(script)
    return result


async def _fx(store, case, ref, script, after, budget_s, progress, work, result: MinifyResult) -> None:
    from pt2_bug_basher.reduce.fx import minify_fx

    out = await minify_fx(store, case, ref, script, after=after, budget_s=budget_s, progress=progress,
                          work_dir=work, out_dir=_out_dir(store, case.case_id))
    result.fx = FxDetails(after=out.after, level=out.level, launcher=str(out.launcher) if out.launcher else None,
                          check_str=out.check_str, trials=out.trials, trial_seconds=out.trial_seconds,
                          minifier_log=out.minifier_log, trial_output=out.trial_output, problem=out.problem)
    result.budget_exhausted = out.timed_out
    if out.nodes_before is not None:
        result.before = {"nodes": out.nodes_before}
    if out.minimized is not None:
        result.minimized_path = str(out.minimized)
        result.resource = resource_uri(case.case_id, out.minimized)
        result.after = {"nodes": out.nodes_after or 0}
        result.confirmed, result.comparison = out.confirmed, out.match
        result.minimized_failure, result.confirm_run_id = out.confirm_failure, out.run_ids.get("confirm")
        result.helped = bool(out.nodes_before and out.nodes_after is not None and out.nodes_after < out.nodes_before)
        if not out.confirmed:
            result.notes.append(f"the minimized repro does not fail the case's way (it shows: {out.confirm_failure})"
                                ": the minifier drifted to another failure; it is kept for reference only")
    if out.problem:
        result.notes.append(out.problem)


_BACKEND_LITERAL = re.compile(r"""backend\s*=\s*['"]([\w.]+)['"]|optimize\(\s*['"]([\w.]+)['"]""")
_NO_INDUCTOR_BACKENDS = {"eager", "aot_eager", "aot_eager_decomp_partition"}


def reducer_preload(source: str) -> tuple[str, ...]:
    """What the reducer's fork server imports once instead of every candidate: torch and Dynamo always, and
    Inductor's compile_fx unless every backend the script names is one that never reaches Inductor."""
    named = {a or b for a, b in _BACKEND_LITERAL.findall(source)}
    if named and named <= _NO_INDUCTOR_BACKENDS:
        return ("torch", "torch._dynamo")
    return ("torch", "torch._dynamo", "torch._inductor.compile_fx")


async def _evaluator(store, case, ref, original: str, work: Path, result: MinifyResult, group):
    """The reducer's candidates run forked from a fork server, or fresh where the repro uses CUDA or no server
    starts (a note says which)."""
    from pt2_bug_basher.reduce.evaluate import ForkServerEvaluator, FreshEvaluator, case_cuda_available, fork_unsafe

    if fork_unsafe(original, cuda_available=case_cuda_available(case)):
        result.notes.append("the repro uses CUDA: candidates run in fresh processes, not forked ones")
        return FreshEvaluator(case, ref.env)
    forked = ForkServerEvaluator(store, case, ref.env, work, parallel=usable_cpus(), preload=reducer_preload(original))
    try:
        await forked.start(group)
    except BugBasherError as exc:
        result.notes.append(f"fork server unavailable ({exc}); candidates run in fresh processes")
        return FreshEvaluator(case, ref.env)
    return forked


async def _source(store, case, ref, script, budget_s, progress, work, result: MinifyResult, cwd, *,
                  polish: bool = False) -> None:
    """The source reducer. A small repro's polish removes statements, inlines helpers and shrinks constants;
    it leaves out the library's expression-level pass, whose many candidates cost a minute for a few
    characters (mode="source" runs it)."""
    from pt2_bug_basher.reduce.source import SourceReducer, size_of

    started = time.monotonic()
    original = script.read_text(errors="replace")
    try:
        ast.parse(original)
    except (SyntaxError, ValueError) as exc:  # a NUL byte is a ValueError on some Python versions
        raise InvalidInput(f"script {script} is not Python source the reducer can parse: {exc}") from exc
    result.before = size_of(original)
    reserve = min(budget_s * 0.3, ref.duration_s + 10.0)  # the fresh confirmation run
    deadline = started + max(1.0, budget_s - reserve)
    work.mkdir(parents=True, exist_ok=True)
    run_cwd = cwd or script.parent
    reduced: str | None = None
    rules = candidate_rules(store, case, ref, original)
    async with anyio.create_task_group() as group:
        evaluator = await _evaluator(store, case, ref, original, work, result, group)
        reducer = SourceReducer(ref, evaluator, work, cwd=run_cwd, name=script.name,
                                timeout_s=run_timeout(ref, factor=3.0, floor=30.0), deadline=deadline,
                                progress=progress, rules=rules)

        async def heartbeat() -> None:  # a long candidate must not leave the client without news
            while True:
                await anyio.sleep(10)
                await reducer._maybe_report(force=True)

        group.start_soon(heartbeat)
        try:
            reduced = await reducer.run(original, use_library=not polish)
        finally:
            with anyio.CancelScope(shield=True):
                await evaluator.aclose()
            group.cancel_scope.cancel()  # the heartbeat
    stats = reducer.stats
    elapsed = max(1e-6, time.monotonic() - started)
    result.source = ReducerStatsOut(
        evaluator=evaluator.kind + f", {evaluator.parallel} at a time", candidates_run=stats.evaluations,
        cached=stats.cache_hits, rejected_without_running=stats.static_rejects,
        evaluations_per_s=round(stats.evaluations / elapsed, 3), phases=stats.phases)
    result.budget_exhausted = stats.budget_exhausted
    if reduced is None:
        result.notes.append("the script, run by the reducer, does not fail the case's way (its first evaluation "
                            f"shows something else): see {work / 'candidates'}")
        return
    target = _out_dir(store, case.case_id) / f"{script.stem}_min_{time.strftime('%H%M%S')}.py"
    header = (f"# Reduced from {script.name} by pt2-bug-basher (case {case.case_id}); "
              f"fails with: {ref.signature}\n")
    target.write_text(header + reduced.rstrip("\n") + "\n")  # ast.unparse leaves no final newline
    result.minimized_path = str(target)
    result.resource = resource_uri(case.case_id, target)
    result.after = size_of(reduced)
    result.helped = result.after["bytes"] < size_of(original)["bytes"]
    # confirm: the file alone, in a fresh process, under the user's file name (the signature names it)
    confirm_dir = work / "confirm"
    confirm_dir.mkdir(parents=True, exist_ok=True)
    confirm_script = confirm_dir / script.name
    shutil.copyfile(target, confirm_script)
    await progress("source reducer: confirming the reduced repro in a fresh process")
    confirm, judged = await confirm_run(store, case, ref, confirm_script, rules, cwd=run_cwd, progress=progress,
                                        label="confirm run")
    verdict = run_failure(confirm)
    result.confirmed = judged.matches
    result.comparison = judged.level
    result.minimized_failure = describe(verdict)
    result.confirm_run_id = confirm.run_id
    if not result.confirmed:
        result.notes.append(f"the reduced file, run alone, does not reproduce the case ({judged.reason}); "
                            "it reproduced inside the reducer only")


async def confirm_run(store: Store, case: CaseRecord, ref: Reference, script: Path, rules: Rules, *, cwd: Path,
                      progress, label: str) -> tuple[RunResult, Match]:
    """A reduction's result, judged by the case's oracle: one recorded run through the launcher (its report
    of what compiled), and where the case passed with compilation off, one more run with it off."""
    argv = [case.python, str(LAUNCHER), "--no-mark", "--", str(script), *ref.args]
    oracle = ref.oracle(rules, script)
    confirm = await execute(store, case, argv, tool="minify", cwd=cwd, env_add=ref.env, timeout_s=run_timeout(ref),
                            progress=progress, label=label, warm=WarmRequest())
    judged = oracle.judge(confirm)
    if not judged.matches or not ref.off_passes:
        return confirm, judged
    off = await execute(store, case, argv, tool="minify", cwd=cwd, env_add={**ref.env, **COMPILE_OFF_ENV},
                        timeout_s=run_timeout(ref), progress=progress, label=f"{label} with compilation off",
                        warm=WarmRequest())
    return confirm, oracle.confirm(confirm, off)


def _record(store: Store, case: CaseRecord, result: MinifyResult) -> None:
    if result.minimized_path is None:
        return
    before = result.before.get("nodes", result.before.get("lines"))
    after = result.after.get("nodes", result.after.get("lines"))
    unit = "nodes" if "nodes" in result.after else "lines"
    name = Path(result.minimized_path).name
    sizes = f" {before} -> {after} {unit}" if before is not None and after is not None else ""
    if result.already_minimal:
        summary = f"{result.why_mode}; {name} fails the case's way ({result.comparison}, run {result.confirm_run_id})"
    elif result.confirmed:
        summary = f"{result.mode} reduction{sizes}: {name} fails the same way ({result.comparison})"
    else:
        summary = f"{result.mode} reduction{sizes}: {name} does not fail the case's way"
    store.add_evidence(case.case_id, Step.reduce.value, result.confirmed, summary[:500], run_id=result.confirm_run_id,
                       data=ReduceEvidence(minimized_path=result.minimized_path, before=result.before,
                                           after=result.after, mode=result.mode, comparison=result.comparison,
                                           budget_exhausted=result.budget_exhausted,
                                           already_minimal=result.already_minimal))
    if result.confirmed:
        result.recorded.append("reduce")


def _next_step(case_id: str, result: MinifyResult, localized: bool) -> str:
    call_src = format_call(ToolName.minify, case_id=case_id, mode="source")
    register = format_call(ToolName.register_test, case_id=case_id, test_file="test/<area>/test_<topic>.py",
                           test_name="<TestClass.test_name>")
    if result.already_minimal and result.confirmed:
        return (f"{Path(result.script).name} is {result.why_mode}. Step 3 is complete; next, turn it into a failing "
                f"unit test: {register}.")
    if result.already_minimal:
        return (f"{result.script} is minimal but does not fail the case's way on its own (see notes). Make it the "
                f"reproduction: {format_call(ToolName.run_with_logs, case_id=case_id, script=result.script, repeat=2)}"
                f", then {format_call(ToolName.minify, case_id=case_id)} again.")
    if result.confirmed:
        more = ""
        reduced = _judged_file(result.minimized_path)
        if result.budget_exhausted and reduced is not None and reduced.small:
            more = f" The budget ran out first, with the repro small ({reduced.describe()}): use it as it is."
        elif result.budget_exhausted:
            more = (" The budget ran out first: this is the best reduction so far; a larger budget_s may shrink it "
                    "further.")
        elif not result.helped:
            more = " The reducer could not make it smaller: it is already minimal for this method."
        return (f"Reduced repro: {result.minimized_path}.{more} Next, turn it into a failing unit test: "
                f"{register}.")
    if result.mode == "fx":
        first = "" if localized else f"; or localise the layer first: {format_call(ToolName.localize, case_id=case_id)}"
        return ("PyTorch's minifier did not give a confirmed smaller repro (see notes). Next try the source "
                f"reducer, which needs no captured graph: {call_src}{first}.")
    if result.minimized_path is None:
        return ("The source reducer could not reproduce the failure from the script (see notes). Check that the "
                "script fails the same way on its own: "
                + format_call(ToolName.run_with_logs, case_id=case_id, script=result.script, repeat=2) + ".")
    return (f"The reduced file does not fail the case's way when run alone. Retry with a larger budget "
            f"({format_call(ToolName.minify, case_id=case_id, mode='source', budget_s=1200)}), or reduce by hand "
            f"from {result.minimized_path}.")


def _judged_file(path: str | None) -> minimal.Minimality | None:
    try:
        return minimal.judge(Path(path).read_text(errors="replace")) if path else None
    except OSError:
        return None
