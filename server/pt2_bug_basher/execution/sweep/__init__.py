"""The regression sweep engine: samples compiled against eager, in any interpreter, in parallel, budgeted.

A caller describes what to sweep in a `SweepSpec`: OpInfo ops by name (`OpSpec`, torch's `op_db`, their
sample inputs) and the circumstances to vary (dtypes, requires_grad, backends, dynamic), and arbitrary
small programs (`ProgramSpec`: Python source that compares compile against eager and raises on a
mismatch: AssertionError is a failure, any other exception an error). It names the interpreter in a
`Target` (the case's python in the repository; or a worktree's sources first on PYTHONPATH).

    run = await run_sweep(spec, target, scratch_dir=..., budget_s=120, launch=case_launcher(store, case, tool))
    run.results  # one SampleResult per sample: key, outcome, message, seconds, rerun (one shell command)

`compare(fix, main)` sets two runs of one spec side by side: regressions (newly failing), also fixed
(newly passing), pre-existing (failing on both). The work is done by `_probes/sweep_probe.py` in the
target interpreter, split into shards run at once (one per usable CPU); each shard stops starting
samples once the budget is spent and reports the rest as not run; a sample that hangs is killed with
its shard (timeout). With `case_launcher` the shards are recorded runs of the case, forked from its warm
interpreter where execution/warm.py allows; `plain_launcher` runs them unrecorded (benchmarks).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.execution.cpus import parallel_runs
from pt2_bug_basher.execution.runner import KILL_GRACE_S, ProcessOutcome, run_process
from pt2_bug_basher.execution.runs import ProgressFn
from pt2_bug_basher.execution.warm import WarmRequest

PROBE = Path(__file__).resolve().parents[2] / "_probes" / "sweep_probe.py"
MARK = "PT2BB-SWEEP:"
DEFAULT_BUDGET_S = 180.0
TABLE_FILE = "table.json"  # a case sweep's full table, in its scratch directory
# Time a shard gets past the budget: its interpreter's start (torch and op_db imports) and the sample it is on.
STARTUP_ALLOWANCE_S = 120.0

Outcome = Literal["pass", "fail", "error", "skip", "timeout", "not_run"]
BAD_OUTCOMES: frozenset[str] = frozenset({"fail", "error", "timeout"})


class OpSpec(BaseModel):
    op: str = Field(description="an op_db name (pow, nn.functional.hardsigmoid), an aten name or an in-place name "
                                "(add_)")
    variant_test_name: str = ""
    inplace: bool = Field(False, description="call the op's in-place variant")


class ProgramSpec(BaseModel):
    name: str = Field(description="a short unique name (the rerun file is named after it)")
    code: str = Field(description="Python source that compares compile against eager and raises on a mismatch")


class SweepSpec(BaseModel):
    ops: list[OpSpec] = Field(default_factory=list)
    programs: list[ProgramSpec] = Field(default_factory=list)
    dtypes: list[str] = Field(default_factory=lambda: ["float32"])
    requires_grad: list[bool] = Field(default_factory=lambda: [False, True])
    backends: list[str] = Field(default_factory=lambda: ["aot_eager"])
    dynamic: list[bool] = Field(default_factory=lambda: [False])
    max_samples_per_op: int = 4


class SampleKey(BaseModel):
    """One sample, exactly: an OpInfo sample (op, variant, sample index, dtype, requires_grad, backend,
    dynamic) or a program (name)."""

    model_config = {"frozen": True}

    kind: Literal["op", "program"]
    op: str = ""
    variant_test_name: str = ""
    inplace: bool = False
    sample: int = 0
    dtype: str = ""
    requires_grad: bool = False
    backend: str = ""
    dynamic: bool = False
    name: str = ""

    def describe(self) -> str:
        if self.kind == "program":
            return f"program {self.name}"
        op = self.op + (f".{self.variant_test_name}" if self.variant_test_name else "") + ("_" if self.inplace else "")
        grad = "requires_grad" if self.requires_grad else "no grad"
        return f"{op} sample {self.sample} {self.dtype} {grad} {self.backend}{' dynamic' if self.dynamic else ''}"

    def probe_args(self, program_file: str | None) -> list[str]:
        if self.kind == "program":
            return ["--program", program_file or self.name]
        args = ["--op", self.op]
        if self.variant_test_name:
            args += ["--variant-test-name", self.variant_test_name]
        if self.inplace:
            args.append("--inplace")
        args += ["--sample", str(self.sample), "--dtype", self.dtype, "--backend", self.backend]
        args += ["--requires-grad"] * self.requires_grad + ["--dynamic"] * self.dynamic
        return args


class SampleResult(BaseModel):
    key: SampleKey
    outcome: Outcome
    message: str = ""
    seconds: float = 0.0
    rerun: str = Field("", description="one shell command that runs this sample alone in the same interpreter")
    frames: list[str] = Field(default_factory=list, description="a failing program's traceback, file:line, "
                                                                "innermost last")


@dataclass(frozen=True)
class Target:
    """The interpreter a sweep runs in: `python` in `cwd` with `env_add` (e.g. a worktree's PYTHONPATH)."""

    label: str
    python: str
    cwd: Path
    env_add: dict[str, str] = field(default_factory=dict)


class SweepRun(BaseModel):
    target: str
    results: list[SampleResult] = Field(default_factory=list)
    unknown_ops: list[str] = Field(default_factory=list, description="names op_db lacks, or ops with random outputs")
    planned: int = 0
    wall_s: float = 0.0
    shards: int = 0
    run_ids: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list, description="shards that crashed or printed nothing")

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for result in self.results:
            counts[result.outcome] = counts.get(result.outcome, 0) + 1
        return counts

    def ops(self) -> list[str]:
        return list(dict.fromkeys(r.key.op for r in self.results if r.key.kind == "op"))


class SweepComparison(BaseModel):
    """Two runs of one spec: on the fix and on main."""

    compared: int = Field(0, description="samples that ran on both sides")
    regressions: list[SampleResult] = Field(default_factory=list, description="fail on the fix, pass on main")
    also_fixed: list[SampleResult] = Field(default_factory=list, description="pass on the fix, fail on main")
    pre_existing: list[SampleResult] = Field(default_factory=list, description="fail on both (the fix's side)")
    main_reruns: dict[str, str] = Field(default_factory=dict, description="sample description -> main's rerun")


# A launcher runs one shard: (argv, cwd, env additions, timeout, label, progress) -> outcome, stdout, run id.
Launched = tuple[ProcessOutcome, Path, str | None]
Launcher = Callable[[list[str], Path, dict[str, str], float, str, ProgressFn | None], Awaitable[Launched]]


def plain_launcher(scratch_dir: Path) -> Launcher:
    """Shards as plain processes (own process group, timeout), logs under scratch_dir; nothing recorded."""

    async def launch(argv: list[str], cwd: Path, env_add: dict[str, str], timeout_s: float, label: str,
                     progress: ProgressFn | None) -> Launched:
        token = f"{label.replace(' ', '-').replace('/', '-')}-{time.monotonic_ns()}"
        out, err = scratch_dir / f"{token}.out", scratch_dir / f"{token}.err"

        async def tick(elapsed: float) -> None:
            if progress is not None:
                await progress(f"{label}: running for {elapsed:.0f}s")

        outcome = await run_process(argv, cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1", **env_add},
                                    timeout_s=timeout_s, stdout_path=out, stderr_path=err, on_progress=tick,
                                    progress_interval_s=5.0)
        return outcome, out, None

    return launch


def case_launcher(store: Store, case: CaseRecord, tool: str) -> Launcher:
    """Shards as recorded runs of the case (runs.execute), forked from its warm interpreter where safe."""
    from pt2_bug_basher.execution.runs import execute

    async def launch(argv: list[str], cwd: Path, env_add: dict[str, str], timeout_s: float, label: str,
                     progress: ProgressFn | None) -> Launched:
        ran = await execute(store, case, argv, tool=tool, cwd=cwd, env_add=env_add, timeout_s=timeout_s,
                            progress=progress, label=label, warm=WarmRequest(start=False))
        return ran.outcome, ran.stdout_path, ran.run_id

    return launch


def _rerun(target: Target, key: SampleKey, program_file: str | None) -> str:
    env = " ".join(f"{name}={shlex.quote(value)}" for name, value in sorted(target.env_add.items()))
    argv = shlex.join([target.python, str(PROBE), *key.probe_args(program_file)])
    return f"cd {shlex.quote(str(target.cwd))} && {env + ' ' if env else ''}{argv}"


def _parse(stdout: Path) -> list[dict]:
    records = []
    try:
        text = stdout.read_text(errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith(MARK):
            try:
                records.append(json.loads(line[len(MARK):]))
            except json.JSONDecodeError:
                continue
    return records


async def run_sweep(spec: SweepSpec, target: Target, *, scratch_dir: Path, launch: Launcher,
                    budget_s: float = DEFAULT_BUDGET_S, shards: int | None = None,
                    grace_s: float = STARTUP_ALLOWANCE_S, progress: ProgressFn | None = None) -> SweepRun:
    """Run every sample of `spec` in `target`'s interpreter, in `shards` processes at once (default: one per
    usable CPU, at most 4), starting no sample after budget_s; a shard still running grace_s later is killed
    (its sample then reads timeout). Programs are written under scratch_dir."""
    started = time.monotonic()
    scratch_dir.mkdir(parents=True, exist_ok=True)
    programs: dict[str, str] = {}
    for program in spec.programs:
        path = scratch_dir / f"program_{_safe(program.name)}.py"
        path.write_text(program.code)
        programs[program.name] = str(path)
    payload = spec.model_dump(exclude={"programs"})
    payload["programs"] = [{"name": name, "file": file} for name, file in programs.items()]
    spec_path = scratch_dir / "spec.json"
    spec_path.write_text(json.dumps(payload, indent=1))
    count = shards or min(4, parallel_runs(4))
    run = SweepRun(target=target.label, shards=count)
    by_shard: list[list[dict]] = [[] for _ in range(count)]

    async def one(index: int) -> None:
        argv = [target.python, str(PROBE), "--spec", str(spec_path), "--shard", f"{index}/{count}",
                "--deadline-s", str(budget_s)]
        outcome, stdout, run_id = await launch(argv, target.cwd, target.env_add,
                                               budget_s + grace_s + 2 * KILL_GRACE_S,
                                               f"sweep {target.label} {index + 1}/{count}", progress)
        if run_id:
            run.run_ids.append(run_id)
        by_shard[index] = _parse(stdout)
        if outcome.timed_out or outcome.exit_code != 0:
            run.problems.append(f"shard {index + 1}/{count} on {target.label}: {outcome.describe_exit()}")

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(one, index)

    for records in by_shard:
        planned = next((r for r in records if "planned" in r), None)
        if planned is None:
            continue
        run.planned += int(planned.get("total", 0)) if not run.planned else 0
        run.unknown_ops.extend(planned.get("unknown_ops", []))
        done: dict[SampleKey, dict] = {}
        started_key: SampleKey | None = None
        for record in records:
            if "start" in record:
                started_key = SampleKey.model_validate(record["start"])
            elif "key" in record:
                done[SampleKey.model_validate(record["key"])] = record
        for raw in planned["planned"]:
            key = SampleKey.model_validate(raw)
            got = done.get(key)
            if got is not None:
                result = SampleResult(key=key, outcome=got["outcome"], message=got.get("message", ""),
                                      seconds=float(got.get("seconds", 0.0)), frames=got.get("frames", []))
            elif key == started_key:
                result = SampleResult(key=key, outcome="timeout", message="its shard was killed while it ran")
            else:
                result = SampleResult(key=key, outcome="not_run", message="its shard ended before it")
            result.rerun = _rerun(target, key, programs.get(key.name))
            run.results.append(result)
    if not any("planned" in r for records in by_shard for r in records):
        run.problems.append(f"the sweep probe printed no plan on {target.label}: see its runs' stderr")
    run.wall_s = round(time.monotonic() - started, 2)
    return run


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:60] or "program"


def compare(fix: SweepRun, main: SweepRun) -> SweepComparison:
    """Regressions, also-fixed and pre-existing failures between two runs of one spec (samples run on both)."""
    theirs = {r.key: r for r in main.results}
    comparison = SweepComparison()
    for ours in fix.results:
        other = theirs.get(ours.key)
        if other is None or "not_run" in (ours.outcome, other.outcome) or "skip" in (ours.outcome, other.outcome):
            continue
        comparison.compared += 1
        bad_here, bad_there = ours.outcome in BAD_OUTCOMES, other.outcome in BAD_OUTCOMES
        if bad_here and not bad_there:
            comparison.regressions.append(ours)
        elif bad_there and not bad_here:
            comparison.also_fixed.append(ours)
        elif bad_here and bad_there:
            comparison.pre_existing.append(ours)
        else:
            continue
        comparison.main_reruns[ours.key.describe()] = other.rerun
    return comparison


def table_rows(fix: SweepRun, main: SweepRun | None) -> list[dict[str, str | None]]:
    """Every sample of a sweep, one row each: its description, outcome on each side, message and reruns."""
    theirs = {r.key: r for r in main.results} if main else {}
    rows: list[dict[str, str | None]] = []
    for ours in fix.results:
        other = theirs.get(ours.key)
        rows.append({"sample": ours.key.describe(), "fix": ours.outcome, "main": other.outcome if other else None,
                     "message": ours.message or (other.message if other else ""), "rerun": ours.rerun,
                     "main_rerun": other.rerun if other else None})
    return rows
