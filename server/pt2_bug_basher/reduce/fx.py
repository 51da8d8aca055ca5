"""The FX-level reducer: PyTorch's own minifier, driven so that it works and says what it does.

1. dump: the repro runs with TORCHDYNAMO_REPRO_AFTER/LEVEL and the debug directory inside the
   case's state directory; the AOT autograd cache is off (with it warm, runtime and accuracy
   failures write no launcher at all), every other cache stays on;
2. minify: the newest minifier_launcher.py of that run runs `minify` under `_probes/fx_driver.py`:
   a check string from the case's failure pins every trial to it, isolated trials are forked from a
   server that has torch and Inductor imported, progress and each trial's output are kept;
3. confirm: the minimized repro runs (`run`) in a separate process (a new interpreter, or a child forked
   from the case's warm interpreter, execution/warm.py) and is judged against the case's own failure
   (never only against the minifier's check), so a drift is reported, not accepted.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from pt2_bug_basher.analysis.compare import FX_RESULT, describe, run_failure
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.execution.runs import LAUNCHER, PROBES, RunResult, execute
from pt2_bug_basher.execution.warm import WarmRequest
from pt2_bug_basher.reduce.evaluate import ForkServerEvaluator, case_cuda_available, fork_unsafe
from pt2_bug_basher.reduce.ladder import Reference, run_timeout

FX_DRIVER = PROBES / "fx_driver.py"
_ENV_LINE = re.compile(r"^os\.environ\['([A-Za-z_][A-Za-z0-9_]*)'\] = '([^'\\]*)'$", re.M)
_EXC_PREFIX = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception|Failed|Unsupported|Exit)\w*: ")


@dataclass
class FxOutcome:
    ok: bool
    after: str
    level: int
    launcher: Path | None = None
    minimized: Path | None = None
    nodes_before: int | None = None
    nodes_after: int | None = None
    check_str: str | None = None
    trials: int = 0
    trial_seconds: float = 0.0
    confirmed: bool = False
    match: str | None = None
    confirm_failure: str | None = None
    run_ids: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    trial_output: str | None = None
    minifier_log: list[str] = field(default_factory=list)
    timed_out: bool = False
    seconds: float = 0.0


def repro_level(ref: Reference) -> int:
    if ref.category == "accuracy":
        return 4
    if (ref.signature or "").startswith("SIG"):
        return 3  # a crash by signal leaves no time to dump afterwards: dump before running the kernel
    return 2


def check_string(ref: Reference) -> str | None:
    """A fragment of the case's error message that the minifier's trials must show."""
    if ref.category == "accuracy" or not ref.message:
        return None
    first = next((ln.strip() for ln in ref.message.splitlines() if ln.strip()), "")
    parts = [p.strip() for p in _EXC_PREFIX.split(first) if p.strip()]
    frag = parts[-1] if parts else first
    runs = [r for r in re.split(r"['\"\\`]", frag) if r.strip()]
    frag = max(runs, key=len).strip() if runs else ""
    # Paths and cache hashes differ between the dump run and the minifier's trials: keep what precedes them.
    frag = re.split(r"\s(?:/|~/|[A-Za-z]:\\)|\b[0-9a-f]{16,}\b", frag)[0]
    frag = frag[:80].strip().rstrip(":").strip()
    return frag if len(frag) >= 4 else None


def _read_status(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return []


def _newest_launcher(root: Path) -> Path | None:
    found = sorted(root.glob("torch_compile_debug/run_*/minifier/minifier_launcher.py"),
                   key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _smallest_checkpoint(dirs: list[Path], since: float) -> tuple[Path, int] | None:
    best: tuple[Path, int] | None = None
    for d in dirs:
        for path in d.glob("**/checkpoints/*.py"):
            m = re.search(r"(\d+)", path.stem)
            if not m or path.stat().st_mtime < since:
                continue
            nodes = int(m.group(1))
            if best is None or nodes < best[1]:
                best = (path, nodes)
    return best


async def minify_fx(
    store: Store, case: CaseRecord, ref: Reference, script: Path, *, after: str, budget_s: float, progress,
    work_dir: Path, out_dir: Path, use_fork_server: bool = True,
) -> FxOutcome:
    """Dump, minify and confirm (the module's three steps); the outcome says where it stopped and why."""
    started = time.monotonic()
    level = repro_level(ref)
    result = FxOutcome(ok=False, after=after, level=level)
    work_dir.mkdir(parents=True, exist_ok=True)
    dump = await _dump(store, case, ref, script, after=after, level=level, work_dir=work_dir, progress=progress)
    result.run_ids["dump"] = dump.run_id
    launcher = _newest_launcher(work_dir)
    if launcher is None:
        result.problem = _no_launcher_problem(dump, after)
        return _finished(result, started)
    result.launcher = launcher
    result.check_str = check_string(ref)
    status_path = work_dir / "minifier-status.jsonl"
    remaining = max(10.0, budget_s - (time.monotonic() - started))
    minify_started = time.time()
    run, on_gpu = await _run_minifier(store, case, ref, script, launcher, after=after, check_str=result.check_str,
                                      status_path=status_path, timeout_s=remaining, progress=progress,
                                      use_fork_server=use_fork_server)
    result.run_ids["minify"] = run.run_id
    result.timed_out = run.outcome.timed_out
    events = _read_status(status_path)
    trials = _read_trials(result, events, forked_on_gpu=on_gpu and use_fork_server)
    errors = [e for e in events if e.get("kind") == "error"]
    best = _smallest_checkpoint([launcher.parent, work_dir], minify_started - 1)
    if errors and best is None:
        result.problem, result.trial_output = _stopped_problem(errors[-1], result.check_str, trials, run)
        return _finished(result, started)
    if best is None:
        result.problem = ("the minifier wrote no checkpoint" + (" before the budget ran out" if result.timed_out
                                                                else "") + f": {run.outcome.describe_exit()}")
        result.trial_output = run.stderr_text(3000)
        return _finished(result, started)
    await _confirm(store, case, ref, result, best, out_dir=out_dir, progress=progress)
    return _finished(result, started)


def _finished(result: FxOutcome, started: float) -> FxOutcome:
    result.seconds = time.monotonic() - started
    return result


async def _dump(store: Store, case: CaseRecord, ref: Reference, script: Path, *, after: str, level: int,
                work_dir: Path, progress) -> RunResult:
    """Step 1: the repro runs with the minifier's dump settings, inside `work_dir`."""
    env = {**ref.env, "TORCHDYNAMO_REPRO_AFTER": after, "TORCHDYNAMO_REPRO_LEVEL": str(level),
           "TORCH_COMPILE_DEBUG_DIR": str(work_dir), "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
    await progress(f"FX minifier: dumping the graph (after={after}, level={level})")
    # PyTorch's dump writes repro.py (and isolate/) into the working directory: never the user's.
    return await execute(store, case, [case.python, str(script), *ref.args], tool="minify", cwd=work_dir,
                         env_add=env, timeout_s=run_timeout(ref), progress=progress, label="minifier dump run")


def _no_launcher_problem(dump: RunResult, after: str) -> str:
    """Why the dump run wrote no minifier_launcher.py, and how it ended."""
    verdict = run_failure(dump)
    if not verdict.failed:
        why = "the repro did not fail when run with the minifier's settings"
    elif after == "aot":
        why = ("no minifier_launcher.py was written. With after=\"aot\" PyTorch only dumps graphs that "
               "Inductor compiles: the failure happens before Inductor (in Dynamo or AOTAutograd) or with "
               "another backend")
    else:
        why = ("no minifier_launcher.py was written: the failure is not raised by the backend compiler on a "
               "captured graph (Dynamo itself fails, or the graph is never compiled)")
    return f"{why}. The dump run ended: {describe(verdict)}"


async def _run_minifier(
    store: Store, case: CaseRecord, ref: Reference, script: Path, launcher: Path, *, after: str,
    check_str: str | None, status_path: Path, timeout_s: float, progress, use_fork_server: bool,
) -> tuple[RunResult, bool]:
    """Step 2: PyTorch's `minify` on the launcher under the driver, its trials forked from a server where the
    graph allows; the run, and whether the graph runs on CUDA (its trials then not forked)."""
    launcher_dir = launcher.parent
    launcher_env = dict(_ENV_LINE.findall(launcher.read_text(errors="replace")))
    argv = [case.python, str(FX_DRIVER), "--launcher", str(launcher), "--status", str(status_path),
            "--backend-source", str(script), "--trial-timeout", f"{run_timeout(ref):.0f}"]
    if check_str:
        argv += ["--check-str", check_str]

    async def report(_message: str) -> None:
        events = _read_status(status_path)
        trials = [e for e in events if e.get("kind") == "trial"]
        lines = [e["line"] for e in events if e.get("kind") == "minifier"]
        nodes = [e["nodes"] for e in events if e.get("kind") == "checkpoint"]
        await progress(f"FX minifier: {len(trials)} trials, "
                       f"{'current graph ' + str(min(nodes)) + ' nodes, ' if nodes else ''}"
                       f"{lines[-1] if lines else 'starting'}")

    forkserver: ForkServerEvaluator | None = None
    on_gpu = fork_unsafe(launcher.read_text(errors="replace"), cuda_available=case_cuda_available(case))
    async with anyio.create_task_group() as group:
        if use_fork_server and after == "aot" and not on_gpu:
            forkserver = ForkServerEvaluator(store, case, {**ref.env, **launcher_env}, launcher_dir,
                                             preload=("torch", "torch._inductor.compile_fx"))
            await forkserver.start(group)
            argv += ["--forkserver", str(forkserver.socket_path)]
        argv += ["--", "minify"]
        if after == "aot" and check_str:
            argv += ["--check-str", check_str]
        try:
            run = await execute(store, case, argv, tool="minify", cwd=launcher_dir, env_add=ref.env,
                                timeout_s=timeout_s, progress=report, label="FX minifier")
        finally:
            if forkserver is not None:
                with anyio.CancelScope(shield=True):
                    await forkserver.aclose()
    return run, on_gpu


def _read_trials(result: FxOutcome, events: list[dict], *, forked_on_gpu: bool) -> list[dict]:
    """The driver's status events into `result` (trials, their seconds, the log, the starting size); the trials."""
    trials = [e for e in events if e.get("kind") == "trial"]
    result.trials = len(trials)
    result.trial_seconds = round(sum(e.get("seconds", 0) for e in trials), 1)
    result.minifier_log = [e["line"] for e in events if e.get("kind") in ("minifier", "note")][-12:]
    if forked_on_gpu:
        result.minifier_log.append("the graph runs on CUDA: its trials ran in fresh processes, not forked ones")
    starts = [int(m.group(1)) for line in result.minifier_log + [e.get("line", "") for e in events]
              for m in [re.match(r"Started off with (\d+) nodes", line)] if m]
    checkpoints = [e["nodes"] for e in events if e.get("kind") == "checkpoint"]
    result.nodes_before = starts[0] if starts else (max(checkpoints) if checkpoints else None)
    return trials


def _stopped_problem(err: dict, check_str: str | None, trials: list[dict], run: RunResult) -> tuple[str, str | None]:
    """The minifier's own error, with no checkpoint: (the problem, the last trial's output)."""
    problem = f"PyTorch's minifier stopped: {err['type']}: {err['message'][:600]}"
    if "did not fail the tester" in err["message"]:
        problem += (" — the original graph, rerun alone, does not fail"
                    + (f" with {check_str!r}" if check_str else "") +
                    ": the trial output below shows what it did instead")
    if trials:
        return problem, _tail_file(Path(trials[-1]["stderr"]), 3000)
    if "InvalidBackend" in err["message"] or "InvalidBackend" in run.stderr_text(200_000):
        problem += (" — the launcher names a backend it cannot find (a custom backend): define it at "
                    "module level of the script so it can be registered, use after=\"aot\", or "
                    "mode=\"source\"")
    return problem, None


async def _confirm(store: Store, case: CaseRecord, ref: Reference, result: FxOutcome, best: tuple[Path, int], *,
                   out_dir: Path, progress) -> None:
    """Step 3: the smallest checkpoint, copied to `out_dir`, runs apart and is judged against the case's failure."""
    source, nodes = best
    result.nodes_after = nodes
    if result.nodes_before is None:
        result.nodes_before = nodes
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"fx_{result.after}_{nodes}nodes_{time.strftime('%H%M%S')}.py"
    shutil.copyfile(source, target)
    result.minimized = target
    await progress(f"FX minifier: confirming the {nodes}-node repro in a separate process")
    # through the launcher: its report says the repro compiled its graph. Its compile-off run would prove
    # nothing (PyTorch's repro calls the backend itself, which TORCHDYNAMO_DISABLE does not stop).
    confirm = await execute(store, case, [case.python, str(LAUNCHER), "--no-mark", "--", str(target)],
                            tool="minify", cwd=target.parent, env_add=ref.env, timeout_s=run_timeout(ref),
                            progress=progress, label="confirm run", warm=WarmRequest())
    result.run_ids["confirm"] = confirm.run_id
    verdict = run_failure(confirm)
    result.match = ref.oracle(FX_RESULT, target).judge_failure(verdict).level
    result.confirmed = result.match is not None
    result.confirm_failure = describe(verdict)
    result.ok = True


def _tail_file(path: Path, limit: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-limit:]
