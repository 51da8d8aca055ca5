"""Step 3: localise (the backend ablation ladder) and the shared parts of minification.

The case's failure is what the reproduction step recorded (its signature, category, exception
type and message). Every run here is judged against it by the case's oracle (`Reference.oracle`:
`analysis.compare.Oracle`, at the strictest level that holds: signature, exception, or for
accuracy failures category; and only after a compiled call). The comparison used is always reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.compare import TRIAL, Failure, Oracle, Rules, describe, run_failure
from pt2_bug_basher.analysis.guards import DynamoDecisions
from pt2_bug_basher.analysis.spectra import Spectrum
from pt2_bug_basher.analysis.verdict import uses_export
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.domain.bisection import BisectReport
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import LadderRowRecord, LocalizeRecord, ReproduceEvidence, Suspect
from pt2_bug_basher.domain.names import RungOutcome, Step, ToolName
from pt2_bug_basher.execution.cpus import usable_cpus
from pt2_bug_basher.execution.dynamo_guards import dynamo_decisions, wants_guard_run
from pt2_bug_basher.execution.runner import ProcessOutcome
from pt2_bug_basher.execution.runs import (
    BASE_ENV,
    LAUNCHER,
    RunResult,
    execute,
    private_cache_env,
    with_spectrum,
)
from pt2_bug_basher.execution.warm import WarmRequest
from pt2_bug_basher.playbooks import EXPORT, reducer_for
from pt2_bug_basher.reduce import minimal
from pt2_bug_basher.reduce.variants import VariantOutcome, read_spectrum

LAUNCHER_MARK = "PT2BB-LAUNCHER:"

# --------------------------------------------------------------------------------------------
# The case's reference failure


@dataclass
class Reference:
    case_id: str
    script: Path
    args: list[str]
    signature: str | None
    category: str
    exception_type: str | None
    message: str | None
    env: dict[str, str]
    """environment additions the reproduction ran with (TORCH_LOGS, the user's env), BASE_ENV removed"""
    duration_s: float
    run_ids: list[str]
    script_sha256: str | None = None
    """the script's content when the reproduction ran it (None: not recorded)"""
    off_passes: bool = False
    """the reproduction's run with compilation off passed"""

    def oracle(self, rules: Rules, script: Path | None = None) -> Oracle:
        """The judgement every run of this case's script (or of `script`, a reduction of it) gets."""
        return Oracle(self.failure, rules, script_name=(script or self.script).name, off_passes=self.off_passes)

    @property
    def failure(self) -> Failure:
        """The case's failure, as the comparison takes it."""
        return Failure(signature=self.signature, category=self.category, exception_type=self.exception_type,
                       message=self.message)


def load_reference(store: Store, case: CaseRecord) -> Reference:
    records = [r for r in store.evidence(case.case_id, Step.reproduce.value) if r.ok]
    if not records:
        raise InvalidInput(
            f"case {case.case_id} has no successful reproduction: run "
            f"{format_call(ToolName.run_with_logs, case_id=case.case_id, script='<repro.py>', repeat=2)} first."
        )
    data = records[-1].payload(ReproduceEvidence)
    env: dict[str, str] = {}
    durations: list[float] = []
    for run_id in data.run_ids:
        try:
            run = store.get_run(run_id, case.case_id)
        except Exception:  # noqa: BLE001 - a missing run only loses its timing
            continue
        if not env:
            env = {k: v for k, v in run.env.items() if k not in BASE_ENV}
        if run.ended_at:
            durations.append(run.ended_at - run.started_at)
    env.update(private_cache_env(store, case.case_id))
    off_passes = _off_passed(store, case.case_id, data.run_ids)
    return Reference(
        case_id=case.case_id, script=Path(data.script), args=list(data.args),
        signature=data.signature, category=data.category or "unknown",
        exception_type=data.exception_type, message=data.message, env=env,
        duration_s=max(durations) if durations else 30.0, run_ids=list(data.run_ids),
        script_sha256=data.script_sha256, off_passes=off_passes,
    )


def _off_passed(store: Store, case_id: str, run_ids: list[str]) -> bool:
    """The reproduction's run with compilation off (the same command, beside its runs) passed."""
    from pt2_bug_basher.execution.repro import COMPILE_OFF_ENV

    runs = store.runs(case_id)
    proving = [r for r in runs if r.run_id in run_ids]
    if not proving:
        return False
    first = proving[0]
    off = [r for r in runs if r.argv == first.argv and r.result is not None
           and all(r.env.get(k) == v for k, v in COMPILE_OFF_ENV.items())]
    if not off:
        return False
    nearest = min(off, key=lambda r: abs(r.started_at - first.started_at))
    return nearest.result is not None and nearest.result.get("failed") is False


def fake_result(run_id: str, outcome: ProcessOutcome, stdout: Path, stderr: Path) -> RunResult:
    return RunResult(run_id, outcome, {}, stdout, stderr)


def run_timeout(ref: Reference, factor: float = 4.0, floor: float = 60.0) -> float:
    """A candidate that runs much longer than the original is killed."""
    return max(floor, factor * ref.duration_s + 20.0)


# --------------------------------------------------------------------------------------------
# localize: the backend ablation ladder


class LadderRow(BaseModel):
    backend: str
    dynamic: str = Field(description="'script' (as the script sets it), 'True' or 'False'")
    outcome: RungOutcome = Field(description="same failure, different failure, passes, timeout, not compiled, or "
                                             "skipped (a backend above the lowest one that fails the case's way)")
    match: str | None = Field(None, description="signature or exception: how it matched the case's failure")
    failure: str | None = None
    run_id: str
    seconds: float = Field(description="the run's own seconds (waiting for a warm interpreter to start not counted)")


class LocalizeResult(BaseModel):
    case_id: str
    script: str
    case_signature: str | None
    table: list[LadderRow]
    first_failing: str | None = Field(None, description="the lowest backend that fails the case's way")
    layer: str = Field(description="where the bug lives, from the ladder")
    meaning: str
    dynamic_shapes: str | None = Field(None, description="what the dynamic=False/True rungs say")
    comparison: str = Field(description="how outcomes were compared with the case's failure")
    minifier: str = Field(description=(
        "the reducer this layer calls for, as a call; minify(mode=\"auto\") runs it (or, for a repro that is small "
        "already, polishes or records it): next_step says which"))
    bisection: BisectReport | None = Field(
        None, description="below the backend: the compiler bisector's subsystems, switched off one by one, then "
                          "the count of the one that fixes it searched down to one application")
    suspects: list[Suspect] = Field(default_factory=list, description="where in torch's source to look, most likely "
                                                                      "first (file relative to the torch checkout)")
    notes: list[str] = Field(default_factory=list)
    dynamo: DynamoDecisions | None = Field(None, description=(
        "the layer is Dynamo and Dynamo raised nothing (a wrong result): one more eager run with "
        "TORCH_LOGS=guards,recompiles,side_effects: what Dynamo compiled, whether later calls recompiled, the "
        "guards on each input, guard shapes that let an entry be reused wrongly, and the caller's objects it "
        "mutated and wrote back"))
    variants: list[VariantOutcome] = Field(default_factory=list, description=(
        "near-miss variants of the repro, each with the one thing it changed and its outcome"))
    circumstances: list[str] = Field(default_factory=list, description=(
        "what the failure needs, from the variants that pass: the one thing each changed"))
    next_step: str


@dataclass(frozen=True)
class Rung:
    """A rung of the ladder: the script's torch.compile calls swapped to `backend`, dynamic as the script sets
    it. When it is the lowest rung that fails the case's way, the bug is in `layer`, and `meaning` says why."""
    backend: str
    layer: str
    meaning: str


# Lowest first, in the style of torch._inductor.compiler_bisector.BACKENDS: each adds one layer to the one below.
RUNGS: tuple[Rung, ...] = (
    Rung("eager", "Dynamo", "it fails with backend='eager', which runs the captured graph as is: the bug is in "
         "Dynamo (tracing, graph breaks, guards, bytecode), not in any compiler behind it."),
    Rung("aot_eager", "AOTAutograd", "eager passes but aot_eager fails: the bug is in AOTAutograd "
         "(functionalization, tracing to ATen, the joint graph, input mutations or aliasing)."),
    Rung("aot_eager_decomp_partition", "decompositions", "aot_eager passes but aot_eager_decomp_partition fails: "
         "a decomposition (or the min-cut partitioner) Inductor uses is wrong."),
    Rung("inductor", "Inductor", "only backend='inductor' fails: the bug is in Inductor (lowering, scheduling, "
         "code generation or the generated kernel)."),
)
BACKENDS = tuple(rung.backend for rung in RUNGS)
_RUNG = {rung.backend: rung for rung in RUNGS}


@dataclass(frozen=True)
class ShapesReading:
    """What the two dynamic rungs (dynamic=False and dynamic=True, at the lowest backend that fails the case's
    way) say together, by which of them fails the case's way; `{dynamic}` is the dynamic=True row's outcome."""
    static_fails: bool
    dynamic_fails: bool
    text: str


SHAPE_RUNGS = ("False", "True")
SHAPES: tuple[ShapesReading, ...] = (
    ShapesReading(False, True, "fixed by static shapes (dynamic=False passes, dynamic=True fails): the bug is in "
                  "dynamic-shape handling (symbolic sizes, guards on them, or their codegen)."),
    ShapesReading(True, False, "fails only with static shapes (dynamic=True {dynamic}): "
                  "a specialisation on concrete sizes is involved."),
    ShapesReading(True, True, "fails with dynamic=False and with dynamic=True: not a dynamic-shapes problem."),
    ShapesReading(False, False, "forcing dynamic either way changes the outcome: compare the two rows."),
)

_EXPORT_MEANING = (
    "the script reaches the compiler through torch.export, which the backend ladder does not swap, so the "
    "ladder cannot tell the layer: the bug is in torch.export itself (tracing, run_decompositions, the "
    "exported program's signature, the module ep.module() builds) or in what export drives (Dynamo for "
    "torch.cond and other higher-order ops, AOTAutograd, the decompositions). The suspects' files say which; "
    "the variants' spectra below say which code ran only when it failed.")
_UNKNOWN_MEANING = (
    "no backend on the ladder fails the case's way: the failure needs the script's own backend or "
    "options (a custom backend, mode=..., config), or does not come from compilation.")


def rung_argv(python: str, script: Path, args: list[str], backend: str | None, dynamic: str = "script") -> list[str]:
    """The command of one rung: the script under the launcher, its torch.compile calls swapped (backend None: the
    script's own backend)."""
    argv = [python, str(LAUNCHER), *(["--backend", backend] if backend else [])]
    if dynamic != "script":
        argv += ["--dynamic", dynamic.lower()]
    return [*argv, "--", str(script), *args]


def shapes_reading(static: LadderRow, dynamic: LadderRow) -> str:
    """What the dynamic=False (`static`) and dynamic=True rows say: the row of SHAPES they fall in."""
    key = (static.outcome == "same failure", dynamic.outcome == "same failure")
    reading = next(r for r in SHAPES if (r.static_fails, r.dynamic_fails) == key)
    return reading.text.format(dynamic=dynamic.outcome)


def first_failing(table: list[LadderRow]) -> str | None:
    """The lowest backend whose row fails the case's way."""
    return next((r.backend for r in table if r.outcome == "same failure"), None)


def layer_reading(first: str | None, through_export: bool, category: str) -> tuple[str, str, tuple[str, str | None]]:
    """(layer, meaning, the reducer's (mode, after)) the ladder's lowest failing backend (or none) calls for."""
    if first is None and through_export:
        return EXPORT, _EXPORT_MEANING, (reducer_for(category, EXPORT)[0], None)
    if first is None:
        return "unknown", _UNKNOWN_MEANING, ("source", None)
    rung = _RUNG[first]
    mode, after = reducer_for(category, rung.layer)
    return rung.layer, rung.meaning, (mode, after if mode == "fx" else None)


def _outcome(verdict: Failure, match: str | None, compiled: bool) -> RungOutcome:
    if verdict.timed_out:
        return "timeout"
    if not compiled:  # no torch.compile call was swapped: the rung ran the script as it is and tells nothing
        return "not compiled"
    if match:
        return "same failure"
    if verdict.failed:
        return "different failure"
    return "passes"


@dataclass
class _Ladder:
    """One localize run: how each rung runs and is judged, and the rows decided so far."""
    store: Store
    case: CaseRecord
    ref: Reference
    script: Path
    progress: Any
    cwd: Path
    limiter: anyio.CapacityLimiter
    on_row: Callable[[LadderRow], None] | None
    spectra: list[Spectrum] | None
    rows: dict[tuple[str, str], LadderRow] = field(default_factory=dict)
    scopes: dict[tuple[str, str], anyio.CancelScope] = field(default_factory=dict)
    timeout: float = field(init=False)
    oracle: Oracle = field(init=False)

    def __post_init__(self) -> None:
        self.timeout = run_timeout(self.ref)
        self.oracle = self.ref.oracle(TRIAL, self.script)

    def command(self, backend: str, dynamic: str) -> list[str]:
        return rung_argv(self.case.python, self.script, self.ref.args, backend, dynamic)

    async def rung(self, backend: str, dynamic: str) -> LadderRow:
        """Run one rung and judge it against the case's failure; its spectrum is kept where it tells."""
        argv = self.command(backend, dynamic)
        out = self.store.case_dir(self.case.case_id) / "spectra" / f"{backend}-{dynamic}-{time.monotonic_ns()}.json"
        if self.spectra is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            argv = with_spectrum(self.store, argv, out)
        async with self.limiter:
            result = await execute(self.store, self.case, argv, tool="localize", cwd=self.cwd, env_add=self.ref.env,
                                   timeout_s=self.timeout, progress=self.progress, warm=WarmRequest(),
                                   label=f"localize backend={backend} dynamic={dynamic}")
        verdict = run_failure(result)
        compiled = LAUNCHER_MARK in result.stderr_text(4 * 1024 * 1024)
        match = self.oracle.judge_failure(verdict).level
        row = LadderRow(backend=backend, dynamic=dynamic, outcome=_outcome(verdict, match, compiled), match=match,
                        failure=None if not verdict.failed else describe(verdict)[:300], run_id=result.run_id,
                        seconds=round(result.outcome.duration_s, 1))  # the run's own, not a warm interpreter's start
        # a rung that ran the script as it is (nothing to swap) still failed the case's way, or passed
        failed = row.outcome == "same failure" or (row.outcome == "not compiled" and self.oracle.fails_alike(verdict))
        if self.spectra is not None and (failed or row.outcome == "passes"):
            found = read_spectrum(out, result.run_id, failed,
                                  f"backend={backend} dynamic={dynamic}")
            if found is not None:
                self.spectra.append(found)
        await self.progress(f"localize: backend={backend} dynamic={dynamic}: {row.outcome}")
        if self.on_row is not None:
            self.on_row(row)
        return row

    def skip_above_first_failing(self) -> None:
        """Once the lowest backend that fails the case's way is known (every one below it ran and did not),
        the layer is decided: the backends above it are not run (or stopped)."""
        for index, backend in enumerate(BACKENDS):
            row = self.rows.get((backend, "script"))
            if row is None:
                return
            if row.outcome == "same failure":
                for higher in BACKENDS[index + 1:]:
                    if (higher, "script") not in self.rows:
                        self.scopes[(higher, "script")].cancel()
                return

    async def put(self, backend: str, dynamic: str) -> None:
        """Decide one row: the rung's, or 'skipped' where a lower backend's failure stopped it."""
        with anyio.CancelScope() as scope:
            self.scopes[(backend, dynamic)] = scope
            self.rows[(backend, dynamic)] = await self.rung(backend, dynamic)
            self.skip_above_first_failing()
        if scope.cancelled_caught:
            first = next(b for b in BACKENDS if (row := self.rows.get((b, "script"))) and row.outcome == "same failure")
            self.rows[(backend, dynamic)] = LadderRow(
                backend=backend, dynamic=dynamic, outcome="skipped", run_id="-", seconds=0.0,
                failure=f"not run, or stopped once started: backend='{first}' below it already fails the case's way")

    async def climb(self) -> list[LadderRow]:
        """The backend rungs, side by side: their rows, lowest first."""
        await self.progress(f"localize: {len(BACKENDS)} backends, {self.limiter.total_tokens:.0f} at a time")
        async with anyio.create_task_group() as group:
            for backend in BACKENDS:
                group.start_soon(self.put, backend, "script")
        return [self.rows[(b, "script")] for b in BACKENDS]

    async def at_first_failing(
        self, first: str, below: Callable[[str | None], Coroutine[Any, Any, None]] | None,
    ) -> tuple[list[LadderRow], list[tuple[DynamoDecisions, list[Suspect]]]]:
        """The dynamic rungs at `first`, beside `below(first)` and (for Dynamo) the guards run: their rows and
        the guards run's decisions."""
        decisions: list[tuple[DynamoDecisions, list[Suspect]]] = []

        async def guards_run() -> None:
            async with self.limiter:
                decisions.append(await dynamo_decisions(
                    self.store, self.case, self.command("eager", "script"), env=self.ref.env, cwd=self.cwd,
                    timeout_s=self.timeout, progress=self.progress))

        async with anyio.create_task_group() as group:
            for dyn in SHAPE_RUNGS:
                group.start_soon(self.put, first, dyn)
            if below is not None:
                group.start_soon(below, first)
            if first == "eager" and wants_guard_run(self.ref.exception_type):
                group.start_soon(guards_run)
        return [self.rows[(first, dyn)] for dyn in SHAPE_RUNGS], decisions


def _notes(table: list[LadderRow], through_export: bool) -> list[str]:
    notes: list[str] = []
    if not any(r.outcome != "not compiled" for r in table):
        notes.append("the script never called torch.compile or torch._dynamo.optimize (torch.export and "
                     "AOTInductor calls are not swapped): the ladder does not apply"
                     + ("; the near-miss variants ran as the script is." if through_export else
                        "; reduce the source instead."))
    if any(r.outcome == "different failure" for r in table):
        notes.append("'different failure' rows fail, but not the case's way: compare them before trusting the "
                     "layer (a lower backend may fail earlier for another reason).")
    return notes


def _comparison(table: list[LadderRow]) -> str:
    matches = {r.match for r in table if r.match}
    return ("exact signature" if matches == {"signature"} else
            "exact signature where it holds, else exception type + normalised message with backend names "
            "removed" + (" (accuracy: same category)" if "category" in matches else ""))


def _next_step(source: str, cid: str, mode: str, minify_call: str) -> str:
    """Reduce it with minify(mode="auto"), or (a repro small or minimal already) polish or record it."""
    auto = format_call(ToolName.minify, case_id=cid, mode="auto")
    judged = minimal.judge(source)
    if judged.minimal:
        return (f"The repro is already minimal ({judged.describe()}): "
                f"{format_call(ToolName.minify, case_id=cid)} records that and completes step 3 "
                "without reducing "
                f"({minify_call} would run the reducer anyway).")
    if judged.small and mode == "source":
        return (f"The repro is small already ({judged.describe()}): "
                f"{auto} polishes it within a budget of about "
                f"{judged.polish_budget_s:.0f} s and completes step 3 ({minify_call} would take "
                "the whole budget).")
    return f"Reduce it: {auto} (from this localisation it runs {minify_call})."


async def localize(
    store: Store, case: CaseRecord, ref: Reference, script: Path, *, progress, cwd: Path | None = None,
    limiter: anyio.CapacityLimiter | None = None,
    below: Callable[[str | None], Coroutine[Any, Any, None]] | None = None,
    on_row: Callable[[LadderRow], None] | None = None, spectra: list[Spectrum] | None = None,
) -> LocalizeResult:
    """The ladder; `below(first_failing)` runs beside the dynamic=False/True rungs, within the same limiter;
    `on_row` sees each row as it is decided. Rungs are children of the case's warm interpreter where one can
    serve them (execution/warm.py), else fresh processes. With `spectra`, each rung records the lines of
    torch's compiler it ran, and those that fail the case's way or pass are added to it."""
    ladder = _Ladder(store, case, ref, script, progress, cwd or script.parent,
                     limiter or anyio.CapacityLimiter(usable_cpus()), on_row, spectra)
    table = await ladder.climb()
    first = first_failing(table)
    source = script.read_text(errors="replace")
    through_export = not any(r.outcome != "not compiled" for r in table) and uses_export(source)
    if first is None and through_export and below is not None:
        await below(None)  # no backend to bisect below, but the variants' spectra still apply
    dynamic_text = None
    decisions: list[tuple[DynamoDecisions, list[Suspect]]] = []
    if first is not None:
        shapes, decisions = await ladder.at_first_failing(first, below)
        table += shapes
        dynamic_text = shapes_reading(*shapes)
    notes = _notes(table, through_export)
    cid = case.case_id
    layer, meaning, (mode, after) = layer_reading(first, through_export, ref.category)
    minify_call = format_call(ToolName.minify, case_id=cid, mode=mode, after=after)
    dynamo, suspects = decisions[0] if decisions else (None, [])
    suspects = [s.model_copy(update={"evidence": [*s.evidence, "guards"]}) for s in suspects]
    if dynamo is not None and dynamo.flags:
        notes.append(f"Dynamo's guards (run {dynamo.run_id}): {dynamo.flags[0].text}; see dynamo and suspects.")
    result = LocalizeResult(
        case_id=cid, script=str(script), case_signature=ref.signature, table=table, first_failing=first,
        layer=layer, meaning=meaning, dynamic_shapes=dynamic_text, comparison=_comparison(table),
        minifier=minify_call, notes=notes, dynamo=dynamo, suspects=suspects,
        next_step=_next_step(source, cid, mode, minify_call),
    )
    record = LocalizeRecord(first_failing=first, layer=layer, signature=ref.signature,
                            table=[LadderRowRecord(**row.model_dump()) for row in table], suspects=suspects,
                            guard_flags=[flag.text for flag in dynamo.flags] if dynamo is not None else [])
    store.set_localization(cid, record)
    return result
