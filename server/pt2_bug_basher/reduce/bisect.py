"""Below the backend: PyTorch's compiler-bisector subsystems, tried side by side.

The subsystems are read from the case's torch (`torch._inductor.compiler_bisector.BACKENDS`) at run
time. Each trial is one fresh process of the repro under the ladder's launcher, steered by the
bisector's environment variables (`TORCH_BISECT_BACKEND`, `TORCH_BISECT_SUBSYSTEM`,
`TORCH_BISECT_MAX`) and judged by the case's own failure with the ladder's comparison. First every
subsystem is switched off on its own (in the bisector's order, as many at a time as there are cores;
the first that fixes the failure wins, as it would for the bisector); then the count of applications
of that subsystem is searched with several probes per round until one application is left. Each
trial prints the applications it saw (`bisect_probe.py`), so the culprit comes with the op or pass
it concerns and the source of the function that implements it.

Trials use a cache directory of their own under the case (holding the bisector's config files) and
run with Inductor's graph caches off, so no bisection state reaches any other process and no cached
graph hides a subsystem's effect.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import anyio
from anyio.abc import TaskGroup
from pydantic import BaseModel

from pt2_bug_basher.analysis.compare import TRIAL, run_failure
from pt2_bug_basher.analysis.failure import CASE_BISECT_CACHE
from pt2_bug_basher.analysis.suspects import helper_candidates, module_name
from pt2_bug_basher.case.store import CaseRecord, Store, new_id
from pt2_bug_basher.domain.bisection import Application, BisectReport, BisectTrial, CodegenCall, SourceSite
from pt2_bug_basher.domain.errors import BugBasherError
from pt2_bug_basher.execution.cpus import usable_cpus
from pt2_bug_basher.execution.isa_builds import seed_isa_builds
from pt2_bug_basher.execution.runner import run_captured
from pt2_bug_basher.execution.runs import (
    CACHE_ENV,
    LAUNCHER,
    PROBES,
    PROGRESS_INTERVAL_S,
    ProgressFn,
    RunResult,
    execute,
)
from pt2_bug_basher.reduce.evaluate import ForkServerEvaluator
from pt2_bug_basher.reduce.ladder import Reference, run_timeout

BISECT_PROBE = PROBES / "bisect_probe.py"
TRACE_MARK = "PT2BB-BISECT:"
CALLS_MARK = "PT2BB-CALLED:"
CALLS_ENV = "PT2BB_COUNT_CALLS"
CODEGEN_MARK = "PT2BB-CODEGEN:"
CODEGEN_ENV = "PT2BB_TRACE_CODEGEN"
MAX_CODEGEN = 8
# Called from many places for any kernel: no evidence about one op's code.
GENERIC_FUNCTION = re.compile(r"(^|\.)(__\w+__|<(genexpr|lambda|listcomp|dictcomp|setcomp)>)$")
BISECTABLE_BACKENDS = ("aot_eager_decomp_partition", "inductor")
DEFAULT_BUDGET_S = 900.0
MAX_APPLICATIONS = 1_000_000
# No cached graph may hide a subsystem's effect; compiled kernels (keyed by their source) stay cached.
# One compile thread: trials already run one per core.
# Imported once by the fork server that CPU-only trials are forked from.
WARM_MODULES = ("torch", "torch._dynamo", "torch._inductor.compile_fx")
TRIAL_CACHES = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
                "TORCHINDUCTOR_COMPILE_THREADS": "1"}

CONFIG_MEANING = {
    "fallback_random": "Inductor's random ops draw different numbers from eager's unless fallback_random=True: "
                       "a mismatch in values that depend on RNG is expected, not a bug.",
    "emulate_precision_casts": "emulating eager's rounding of low-precision intermediates fixes it: the "
                               "difference is the expected numerics of fusion (intermediates kept in higher "
                               "precision), usually not a bug; compare against a float64 reference.",
    "layout_optimization": "Inductor's layout optimisation (channels-last convolutions) changes the result: "
                           "look at the layout decisions and the ops that consume the converted tensors.",
    "comprehensive_padding": "stride padding changes the result: an op assumes contiguous or unpadded strides.",
    "cse": "common-subexpression elimination in AOTAutograd's graph changes the result: two ops that are not "
           "equivalent were merged (side effects, RNG or aliasing).",
}


class Subsystem(BaseModel):
    name: str
    kind: str
    config_name: str | None = None
    field: str | None = None
    value: str | None = None
    knob: SourceSite | None = None


class BisectorTable(BaseModel):
    backends: dict[str, list[Subsystem]]
    cuda: bool
    torch_parent: str


async def read_table(store: Store, case: CaseRecord, cwd: Path) -> BisectorTable:
    """The case's torch's BACKENDS table (its subsystems, in the bisector's order)."""
    captured = await run_captured([case.python, str(BISECT_PROBE), "table"], cwd=cwd,
                                  env=_environ({}), timeout_s=120.0, scratch_dir=store.case_dir(case.case_id))
    if captured.outcome.exit_code != 0:
        raise RuntimeError(f"reading the compiler bisector's table failed: {captured.stderr[-800:]}")
    return BisectorTable.model_validate_json(captured.stdout.strip().splitlines()[-1])


def _environ(extra: dict[str, str]) -> dict[str, str]:
    import os

    return {**os.environ, **extra}


def parse_calls(stderr: str) -> dict[str, int] | None:
    for line in reversed(stderr.splitlines()):
        if line.startswith(CALLS_MARK):
            try:
                data = json.loads(line[len(CALLS_MARK):])
            except ValueError:
                return None
            return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else None
    return None


def parse_codegen(stderr: str) -> list[CodegenCall] | None:
    for line in reversed(stderr.splitlines()):
        if line.startswith(CODEGEN_MARK):
            try:
                return [CodegenCall.model_validate(row) for row in json.loads(line[len(CODEGEN_MARK):])]
            except ValueError:
                return None
    return None


def codegen_difference(failing: list[CodegenCall], passing: list[CodegenCall]) -> list[CodegenCall]:
    """Code-generation functions the failing trial ran and the passing one never did, generic ones left out;
    those that returned code text first, each group in first-call order."""
    ran = {(c.file, c.function) for c in passing}
    only = [c for c in failing if (c.file, c.function) not in ran and not GENERIC_FUNCTION.search(c.function)]
    return sorted(only, key=lambda c: not c.emits)


def parse_trace(stderr: str, subsystem: str) -> list[Application]:
    seen: list[Application] = []
    for line in stderr.splitlines():
        if not line.startswith(TRACE_MARK):
            continue
        try:
            data = json.loads(line[len(TRACE_MARK):])
        except ValueError:
            continue
        if data.get("subsystem") == subsystem:
            seen.append(Application.model_validate(data))
    return seen


def trial_env(store: Store, case: CaseRecord, ref: Reference) -> dict[str, str]:
    """What every trial shares (read by torch at import: a fork server's own environment)."""
    return {**ref.env, CACHE_ENV: str(store.case_dir(case.case_id) / CASE_BISECT_CACHE), **TRIAL_CACHES}


async def start_trial_server(store: Store, case: CaseRecord, ref: Reference, task_group: TaskGroup,
                             progress: ProgressFn) -> ForkServerEvaluator | None:
    """A server that forks trials from one interpreter that imported torch and Inductor once. Only for a
    torch without CUDA (never fork from an interpreter that might touch CUDA); None when it cannot start."""
    env = trial_env(store, case, ref)
    seed_isa_builds(Path(env[CACHE_ENV]), env)
    server = ForkServerEvaluator(store, case, env, Path(env[CACHE_ENV]) / "forkserver", preload=WARM_MODULES,
                                 tool="localize")
    try:
        await server.start(task_group)
    except BugBasherError as exc:
        await progress(f"bisect: trials will run in fresh processes ({exc})")
        return None
    return server


class _Trials:
    """Runs trials for one backend within the cores and the budget, recording each."""

    def __init__(self, store: Store, case: CaseRecord, ref: Reference, script: Path, backend: str, cwd: Path,
                 progress: ProgressFn, deadline: float, limiter: anyio.CapacityLimiter) -> None:
        self.store, self.case, self.ref, self.script, self.backend = store, case, ref, script, backend
        self.cwd, self.progress, self.deadline = cwd, progress, deadline
        self.cache_dir = store.case_dir(case.case_id) / CASE_BISECT_CACHE
        self.limiter = limiter
        self.trials: list[BisectTrial] = []
        self.timeout = run_timeout(ref)
        self.forked: ForkServerEvaluator | None = None
        self.last_calls: dict[str, int] | None = None
        self.codegen: dict[tuple[str, int | None], list[CodegenCall] | None] = {}

    @property
    def shared_env(self) -> dict[str, str]:
        return trial_env(self.store, self.case, self.ref)

    def write_config(self, sub: Subsystem) -> None:
        """The bisector reads a config switch from `<cache>/bisect/<backend>/<name>_config.txt`."""
        path = self.cache_dir / "bisect" / self.backend / f"{sub.name}_config.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{sub.field}={sub.value}\n")

    async def run(self, sub: Subsystem, max_enabled: int | None, extra: dict[str, str] | None = None
                  ) -> tuple[BisectTrial, list[Application]]:
        steer = {"TORCH_BISECT_BACKEND": self.backend, "TORCH_BISECT_SUBSYSTEM": sub.name, **(extra or {})}
        if max_enabled is not None:
            steer["TORCH_BISECT_MAX"] = str(max_enabled)
        if self.backend == "inductor":
            steer[CODEGEN_ENV] = "1"
        argv = [self.case.python, str(LAUNCHER), "--backend", self.backend, "--bisect-trace", "--",
                str(self.script), *self.ref.args]
        label = f"bisect {self.backend}/{sub.name}" + (f" max={max_enabled}" if max_enabled is not None else "")
        async with self.limiter:
            if time.monotonic() > self.deadline:
                trial = BisectTrial(subsystem=sub.name, max_enabled=max_enabled, outcome="skipped")
                self.trials.append(trial)
                return trial, []
            started = time.monotonic()
            if self.forked is not None:
                result = await self._forked_run(argv, steer, label)
            else:
                result = await execute(self.store, self.case, argv, tool="localize", cwd=self.cwd,
                                       env_add={**self.shared_env, **steer}, timeout_s=self.timeout,
                                       progress=self.progress, label=label)
        verdict = run_failure(result)
        if verdict.timed_out:
            outcome = "timeout"
        elif self.ref.oracle(TRIAL, self.script).judge_failure(verdict).matches:
            outcome = "same failure"
        elif verdict.failed:
            outcome = "different failure"
        else:
            outcome = "fixed"
        trial = BisectTrial(subsystem=sub.name, max_enabled=max_enabled, outcome=outcome, run_id=result.run_id,
                            seconds=round(time.monotonic() - started, 1))
        self.trials.append(trial)
        await self.progress(f"{label}: {outcome}")
        stderr = result.stderr_text(16 * 1024 * 1024)
        self.last_calls = parse_calls(stderr)
        self.codegen[(sub.name, max_enabled)] = parse_codegen(stderr)
        return trial, parse_trace(stderr, sub.name)

    async def _tick(self, label: str, scope: anyio.CancelScope) -> None:
        started = time.monotonic()
        while not scope.cancel_called:
            await anyio.sleep(PROGRESS_INTERVAL_S)
            await self.progress(f"{label}: running for {time.monotonic() - started:.0f}s")

    async def _forked_run(self, argv: list[str], steer: dict[str, str], label: str) -> RunResult:
        """A trial in a child forked from the warm server: a separate process, recorded as its own run
        (its argv says it was forked, from which server run)."""
        assert self.forked is not None
        run_id = new_id("run")
        run_dir = self.store.case_dir(self.case.case_id) / "runs" / run_id
        stdout, stderr = run_dir / "stdout.log", run_dir / "stderr.log"
        recorded = [f"<child forked from {self.forked.run_id or 'the fork server'}>", *argv[1:]]
        self.store.start_run(self.case.case_id, "localize", recorded, str(self.cwd), {**self.shared_env, **steer},
                             str(stdout), str(stderr), os.getpid(), run_id=run_id)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._tick, label, group.cancel_scope)
                result = await self.forked.run(self.script, self.ref.args, cwd=self.cwd, out_dir=run_dir,
                                               timeout_s=self.timeout,
                                               options={"backend": self.backend, "env": steer, "bisect_trace": True})
                group.cancel_scope.cancel()
        except BaseException:
            self.store.finish_run(run_id, "cancelled", None, None)
            raise
        self.store.finish_run(run_id, result.outcome.status, result.outcome.exit_code, result.outcome.signal_name)
        return RunResult(run_id, result.outcome, steer, stdout, stderr)


async def _first_fixer(trials: _Trials, subsystems: list[Subsystem]
                       ) -> tuple[Subsystem | None, list[Application], list[str]]:
    """Switch each subsystem off on its own, in order, several at once; stop once the first fixer is known."""
    outcomes: dict[int, tuple[BisectTrial, list[Application]]] = {}
    decided: list[int] = []

    def settle() -> bool:
        for i in range(len(subsystems)):
            if i not in outcomes:
                return False
            if outcomes[i][0].outcome == "fixed":
                decided.append(i)
                return True
        return True

    async with anyio.create_task_group() as group:
        async def one(i: int) -> None:
            sub = subsystems[i]
            if sub.kind == "config":
                trials.write_config(sub)
            outcomes[i] = await trials.run(sub, None if sub.kind == "config" else -1)
            if settle():
                group.cancel_scope.cancel()

        for i in range(len(subsystems)):
            group.start_soon(one, i)
    differing = [subsystems[i].name for i, (t, _) in sorted(outcomes.items()) if t.outcome == "different failure"]
    if not decided:
        return None, [], differing
    index = decided[0]
    return subsystems[index], outcomes[index][1], differing


def _counting_env(application: Application | None) -> dict[str, str] | None:
    """The variable that makes a trial count the calls of the helpers of an application's implementation."""
    sites = application.sites if application is not None else []
    site = sites[-1] if sites and "<locals>" not in sites[-1].function else None
    names = helper_candidates(site) if site is not None else []
    return {CALLS_ENV: f"{module_name(site)}:{','.join(names)}"} if site is not None and names else None


async def _search(trials: _Trials, sub: Subsystem, count: int, known: list[Application] | None = None,
                  calls: dict[int, dict[str, int] | None] | None = None,
                  ) -> tuple[int | None, dict[int, list[Application]], tuple[int, int], bool]:
    """Smallest m such that applications 0..m on (the rest off) fail the case's way.

    f(-1) is known false (all off fixes it) and f(count-1) is taken as true (all on is the reproduction)
    until a trial shows otherwise: when it passes there are more applications than counted, and the range
    doubles; when it fails another way, counting does not reproduce the failure and the search stops (the
    last value: True). Each round probes as many points as there are cores, evenly spread over the open
    range. The answer is always a point some trial saw fail. `known`: the applications the all-off trial
    saw; a probe at m counts the calls of application m's helpers (into `calls`), so the answer's trial is
    also its confirming one.
    """
    lo, hi = -1, max(count - 1, 0)
    seen: dict[int, list[Application]] = {}
    by_counter = {a.counter: a for a in known or []}
    width = max(1, int(trials.limiter.total_tokens))
    while True:
        if hi == lo + 1 and hi in seen:
            return hi, seen, (lo, hi), False
        if time.monotonic() > trials.deadline:
            return None, seen, (lo, hi), False
        span = hi - lo
        points = sorted({lo + round(k * span / (width + 1)) for k in range(1, width + 1)})
        points = [p for p in points if lo < p < hi] or [hi]
        outcomes: dict[int, str] = {}
        async with anyio.create_task_group() as group:
            for point in points:
                group.start_soon(_probe, trials, sub, point, seen, outcomes, _counting_env(by_counter.get(point)),
                                 calls if calls is not None else {})
        if "skipped" in outcomes.values():
            return None, seen, (lo, hi), False
        failing = [p for p in sorted(outcomes) if outcomes[p] == "same failure"]
        if failing:
            hi = failing[0]
            lo = max([lo, *(p for p in outcomes if p < hi)])
        elif max(outcomes) >= hi and outcomes[hi] == "different failure":
            return None, seen, (lo, hi), True  # all counted applications on, and it fails another way
        elif max(outcomes) >= hi:  # all counted applications on and it passes: there are more than counted
            if hi >= MAX_APPLICATIONS:
                return None, seen, (lo, hi), False
            lo, hi = hi, 2 * hi + 1
        else:
            lo = max(outcomes)


async def _probe(trials: _Trials, sub: Subsystem, point: int, seen: dict[int, list[Application]],
                 outcomes: dict[int, str], counting: dict[str, str] | None,
                 calls: dict[int, dict[str, int] | None]) -> None:
    trial, apps = await trials.run(sub, point, counting)
    seen[point] = apps
    if counting is not None:
        calls[point] = trials.last_calls  # set by this very run: no await in between
    outcomes[point] = trial.outcome


async def bisect_below(store: Store, case: CaseRecord, ref: Reference, script: Path, backend: str, *,
                       progress: ProgressFn, cwd: Path, budget_s: float = DEFAULT_BUDGET_S,
                       table: BisectorTable | None = None, limiter: anyio.CapacityLimiter | None = None,
                       forked: ForkServerEvaluator | None = None) -> BisectReport:
    """`forked`: a trial server already started (start_trial_server), left running; else one is started here
    for a torch without CUDA and stopped at the end."""
    started = time.monotonic()
    table = table or await read_table(store, case, cwd)
    notes: list[str] = []
    subsystems = list(table.backends.get(backend, []))
    if not table.cuda and any(s.name == "cudagraphs" for s in subsystems):
        subsystems = [s for s in subsystems if s.name != "cudagraphs"]
        notes.append("cudagraphs was not tried: this torch has no CUDA, so nothing is wrapped in CUDA graphs.")
    await progress(f"bisect: {len(subsystems)} subsystems of {backend} from the case's torch")
    trials = _Trials(store, case, ref, script, backend, cwd, progress, started + budget_s,
                     limiter or anyio.CapacityLimiter(usable_cpus()))
    if forked is not None:
        trials.forked = forked
        return await _bisect(trials, subsystems, backend, notes, started)
    async with anyio.create_task_group() as group:
        if not table.cuda:
            trials.forked = await start_trial_server(store, case, ref, group, progress)
        try:
            report = await _bisect(trials, subsystems, backend, notes, started)
        finally:
            if trials.forked is not None:
                await trials.forked.aclose()
    return report


async def _bisect(trials: _Trials, subsystems: list[Subsystem], backend: str, notes: list[str],
                  started: float) -> BisectReport:
    if trials.forked is not None:
        notes.append("trials ran in children forked from one interpreter that had imported torch (each a "
                     "separate process, recorded as its own run).")
    fixer, off_apps, differing = await _first_fixer(trials, subsystems)
    if differing:
        notes.append("switching off " + ", ".join(differing) + " made it fail differently (not counted as a fix).")

    def report(**fields) -> BisectReport:
        return BisectReport(backend=backend, trials=trials.trials, notes=notes,
                            budget_exhausted=time.monotonic() > trials.deadline,
                            seconds=round(time.monotonic() - started, 1), **fields)

    if fixer is None:
        skipped = any(t.outcome == "skipped" for t in trials.trials)
        return report(result=f"BisectionResult(backend={backend!r})", meaning=(
            "the budget ran out before every subsystem was tried" if skipped else
            f"no subsystem of {backend} fixes the failure when switched off: the bug is in {backend} itself "
            "(code generation, scheduling or the kernels), outside what the bisector can switch."))
    if fixer.kind == "config":
        field = fixer.field or fixer.name
        return report(subsystem=fixer.name, kind="config", config=fixer.knob,
                      result=f"BisectionResult(backend={backend!r}, subsystem={fixer.name!r})",
                      meaning=f"setting {fixer.config_name} config {field}={fixer.value} fixes it. "
                              + CONFIG_MEANING.get(field, ""))
    await trials.progress(f"bisect: switching off {fixer.name} fixes it; {len(off_apps)} applications to search")
    single = await _single_application(trials, fixer, off_apps[0]) if len(off_apps) == 1 else None
    found: int | None
    calls: dict[int, dict[str, int] | None] = {}
    differs = False
    if single is not None:
        found, seen, (lo, hi) = 0, single, (-1, 0)
    else:
        found, seen, (lo, hi), differs = await _search(trials, fixer, len(off_apps), off_apps, calls)
    if found is None and differs:
        return report(subsystem=fixer.name, kind="bisect", applications=len(off_apps), candidates=off_apps[:20],
                      result=f"BisectionResult(backend={backend!r}, subsystem={fixer.name!r})",
                      meaning=f"switching off {fixer.name} fixes it, but with only its first applications on, "
                              f"up to all {len(off_apps)} it counted, it fails another way: no count of them "
                              f"reproduces the failure, so the bisector names the subsystem alone (its "
                              f"applications are listed in candidates).")
    if found is None:
        left = [a for a in (seen.get(hi) or off_apps) if lo < a.counter <= hi][:20]
        return report(subsystem=fixer.name, kind="bisect", applications=len(off_apps), candidates=left,
                      result=f"BisectionResult(backend={backend!r}, subsystem={fixer.name!r})",
                      meaning=f"switching off {fixer.name} fixes it; the budget ran out with applications "
                              f"{lo + 1}..{hi} left (listed in candidates).")
    culprit = next((a for a in seen.get(found, []) if a.counter == found), None)
    counted_here = _counting_env(culprit) is not None and _counting_env(culprit) == _counting_env(
        next((a for a in off_apps if a.counter == found), None))
    if single is None and culprit is not None and found in calls and counted_here:
        culprit.helpers_called = calls[found]  # the probe that found it counted them
    elif single is None and culprit is not None and culprit.sites and "<locals>" not in culprit.sites[-1].function:
        await _count_helper_calls(trials, fixer, found, culprit, notes)
    subject = (culprit.subject or culprit.debug) if culprit else None
    codegen = _codegen_of(trials, fixer, found, notes)
    return report(subsystem=fixer.name, kind="bisect", bisect_number=found, applications=len(off_apps),
                  culprit=culprit, codegen=codegen[:MAX_CODEGEN], codegen_total=len(codegen),
                  result=(f"BisectionResult(backend={backend!r}, subsystem={fixer.name!r}, bisect_number={found}, "
                          f"debug_info={culprit.debug if culprit else None!r})"),
                  meaning=_meaning(fixer.name, found, culprit, subject))


def _codegen_of(trials: _Trials, sub: Subsystem, found: int, notes: list[str]) -> list[CodegenCall]:
    """For a lowering: the code generation that ran only with it on, from the trial at the culprit (fails)
    and the one just below it (passes), which the search already ran."""
    if sub.name != "lowerings" or trials.backend != "inductor":
        return []
    failing, passing = trials.codegen.get((sub.name, found)), trials.codegen.get((sub.name, found - 1))
    if failing is None or passing is None:
        notes.append("no code-generation trace came from the trials at the culprit and below it, so the "
                     "code generation that only the culprit's kernels ran is not listed.")
        return []
    return codegen_difference(failing, passing)


async def _single_application(trials: _Trials, sub: Subsystem, only: Application
                              ) -> dict[int, list[Application]] | None:
    """A subsystem applied once: the trial that sees application #0 fail (the rest are none) also counts its
    helpers' calls, instead of a search probe and a confirming trial at the same point. None when it does
    not fail the case's way (the search then decides)."""
    extra = _counting_env(only)
    trial, apps = await trials.run(sub, 0, extra)
    if trial.outcome != "same failure":
        return None
    culprit = next((a for a in apps if a.counter == 0), None)
    if culprit is not None and extra is not None:
        culprit.helpers_called = trials.last_calls
    return {0: apps}


async def _count_helper_calls(trials: _Trials, sub: Subsystem, found: int, culprit: Application,
                              notes: list[str]) -> None:
    """One more trial at the culprit, counting which of its implementation's helpers the failing run calls."""
    site = culprit.sites[-1]
    names = helper_candidates(site)
    if not names:
        return
    trial, _ = await trials.run(sub, found, {CALLS_ENV: f"{module_name(site)}:{','.join(names)}"})
    if trial.outcome != "same failure":
        notes.append(f"the confirming run at {sub.name} #{found} did not fail the same way ({trial.outcome}): "
                     "the search may have met a flaky failure.")
        return
    culprit.helpers_called = trials.last_calls


def _meaning(subsystem: str, number: int, culprit: Application | None, subject: str | None) -> str:
    what = f"application #{number} of {subsystem}"
    if culprit is not None and culprit.debug:
        what += f" ({culprit.debug}" + (f" = {subject}" if subject and subject != culprit.debug else "") + ")"
    first = "with it and every earlier one on (every later one off) the case fails; with it off too, it passes"
    if subsystem == "lowerings":
        return (f"{what} is the first lowering that brings the failure back ({first}, the op falling back to "
                "ATen): read how Inductor lowers and generates code for that op.")
    if subsystem == "decomposition":
        return f"{what} is the first decomposition that brings the failure back ({first}): read that decomposition."
    return f"{what} is the first pass application that brings the failure back ({first}): read that pass."
