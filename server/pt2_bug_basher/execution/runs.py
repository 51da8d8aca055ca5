"""Recorded runs: every process a tool starts for a case goes through here.

Each run gets a run_id, its logs under the case's state directory, and a row in the store with
its command line, environment additions, exit status and timings. Progress is reported while it
runs; runs left 'running' by a server that died are marked interrupted at the next start.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from pt2_bug_basher.analysis.failure import CASE_INDUCTOR_CACHE
from pt2_bug_basher.case.pages import read_tail
from pt2_bug_basher.case.store import CaseRecord, Store, new_id
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.execution.isa_builds import keep_isa_builds, seed_isa_builds
from pt2_bug_basher.execution.runner import (
    DEFAULT_LOG_CAP,
    ForkRefused,
    ProcessOutcome,
    group_alive,
    kill_tree,
    process_alive,
    run_forked,
    run_process,
    wait_gone,
)
from pt2_bug_basher.execution.warm import WarmRequest, WarmServer

DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 4 * 3600.0
PROGRESS_INTERVAL_S = 5.0
# Always set for runs: unbuffered output streams as it happens; faulthandler gives crashes a stack.
BASE_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
_ENV_NAME_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_PROTECTED_ENV = {"LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONHOME"}

ProgressFn = Callable[[str], Awaitable[None]]
PROBES = Path(__file__).resolve().parents[1] / "_probes"
SPECTRUM_PROBE = PROBES / "spectrum.py"
LAUNCHER = PROBES / "launcher.py"
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def private_cache_env(store: Store, case_id: str) -> dict[str, str]:
    """The case's own Inductor cache directory, so no state (compiled graphs, the compiler bisector's
    files) leaks between cases or into other processes on the machine, and none leaks in."""
    return {CACHE_ENV: str(store.case_dir(case_id) / CASE_INDUCTOR_CACHE)}


async def ignore_progress(message: str) -> None:
    """A progress callback that reports nothing (for callers that want no news)."""


@dataclass
class RunResult:
    run_id: str
    outcome: ProcessOutcome
    env_add: dict[str, str]
    stdout_path: Path
    stderr_path: Path
    forked_from: str | None = None
    """the warm interpreter's run the process was forked from; None for a new process"""

    def stderr_text(self, limit: int = DEFAULT_LOG_CAP) -> str:
        return read_tail(self.stderr_path, limit) or ""

    def stdout_text(self, limit: int = DEFAULT_LOG_CAP) -> str:
        return read_tail(self.stdout_path, limit) or ""


def check_timeout(timeout_s: float | None) -> float:
    if timeout_s is None:
        return DEFAULT_TIMEOUT_S
    if not (timeout_s > 0) or timeout_s > MAX_TIMEOUT_S:
        raise InvalidInput(f"timeout_s must be between 0 and {MAX_TIMEOUT_S:.0f} seconds, not {timeout_s}.")
    return float(timeout_s)


def check_env_additions(env: dict[str, str] | None) -> dict[str, str]:
    """Validate caller-supplied environment variables: plain names, no NULs, nothing that hijacks the loader."""
    env = dict(env or {})
    if len(env) > 200:
        raise InvalidInput("pass at most 200 environment variables.")
    for name, value in env.items():
        if not name or name[0].isdigit() or not set(name) <= _ENV_NAME_CHARS or len(name) > 200:
            raise InvalidInput(f"environment variable name {name!r} is not valid: use letters, digits and _.")
        if name in _PROTECTED_ENV:
            raise InvalidInput(f"{name} cannot be set through a tool; set it in the environment the server runs in.")
        if not isinstance(value, str) or "\x00" in value or len(value) > 32768:
            raise InvalidInput(f"the value of {name} must be a string under 32 KiB without NUL bytes.")
    return env


async def execute(
    store: Store,
    case: CaseRecord,
    argv: list[str],
    *,
    tool: str,
    cwd: Path,
    env_add: dict[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: ProgressFn | None = None,
    label: str = "run",
    log_cap: int = DEFAULT_LOG_CAP,
    warm: WarmRequest | None = None,
) -> RunResult:
    """Run argv for a case, recording it in the store; the caller parses the logs.

    With `warm`, a run of the case's interpreter may be a child forked from a warm interpreter of the
    case (execution/warm.py says when); otherwise, and whenever that cannot be, it is a new process."""
    additions = {**BASE_ENV, **private_cache_env(store, case.case_id), **(env_add or {})}
    environ = {**os.environ, **additions}
    cache_dir = Path(additions[CACHE_ENV])
    seed_isa_builds(cache_dir, environ)
    started = time.time()
    try:
        if warm is not None:
            forked = await _execute_forked(store, case, argv, tool=tool, cwd=cwd, additions=additions,
                                           environ=environ, timeout_s=timeout_s, progress=progress, label=label,
                                           log_cap=log_cap, warm=warm)
            if forked is not None:
                return forked
        return await _execute_new(store, case, argv, tool=tool, cwd=cwd, additions=additions, environ=environ,
                                  timeout_s=timeout_s, progress=progress, label=label, log_cap=log_cap)
    finally:
        keep_isa_builds(cache_dir, since=started)


async def _execute_new(
    store: Store, case: CaseRecord, argv: list[str], *, tool: str, cwd: Path, additions: dict[str, str],
    environ: dict[str, str], timeout_s: float, progress: ProgressFn | None, label: str, log_cap: int,
) -> RunResult:
    """The run as a new process."""
    run_id = new_id("run")
    run_dir = store.case_dir(case.case_id) / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = run_dir / "stdout.log", run_dir / "stderr.log"
    store.start_run(
        case.case_id, tool, argv, str(cwd), additions, str(stdout_path), str(stderr_path), os.getpid(), run_id=run_id
    )

    async def tick(elapsed: float) -> None:
        if progress is not None:
            await progress(f"{label}: running for {elapsed:.0f}s")

    try:
        outcome = await run_process(
            argv, cwd=cwd, env=environ, timeout_s=timeout_s, stdout_path=stdout_path, stderr_path=stderr_path,
            log_cap=log_cap, on_start=lambda pid: store.set_run_pid(run_id, pid), on_progress=tick,
            progress_interval_s=PROGRESS_INTERVAL_S,
        )
    except BaseException:
        store.finish_run(run_id, "cancelled", None, None)
        raise
    store.finish_run(run_id, outcome.status, outcome.exit_code, outcome.signal_name)
    return RunResult(run_id, outcome, additions, stdout_path, stderr_path)


async def _execute_forked(
    store: Store, case: CaseRecord, argv: list[str], *, tool: str, cwd: Path, additions: dict[str, str],
    environ: dict[str, str], timeout_s: float, progress: ProgressFn | None, label: str, log_cap: int,
    warm: WarmRequest,
) -> RunResult | None:
    """The run as a child of the case's warm interpreter for its environment; None when it must be a new
    process. It is recorded like any run, its argv led by `<child forked from run-...>`."""
    from pt2_bug_basher.execution import warm as warm_interpreters

    plan = warm_interpreters.plan(case, argv, cwd, environ, warm)
    if plan is None:
        return None

    async def tick(elapsed: float) -> None:
        if progress is not None:
            await progress(f"{label}: running for {elapsed:.0f}s")

    for _attempt in range(2):  # a server whose sources changed is replaced once
        server = await warm_interpreters.acquire(store, case, plan, tool, additions, start=warm.start)
        if server is None:
            return None
        run_id = new_id("run")
        run_dir = store.case_dir(case.case_id) / "runs" / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        stdout_path, stderr_path = run_dir / "stdout.log", run_dir / "stderr.log"
        record = _ForkedRecord(store, case.case_id, run_id, tool, [f"<child forked from {server.run_id}>", *argv[1:]],
                               str(cwd), additions, stdout_path, stderr_path, server)
        try:
            outcome = await run_forked(server.socket_path, plan.request_for(server), argv=argv, timeout_s=timeout_s,
                                       stdout_path=stdout_path, stderr_path=stderr_path, log_cap=log_cap,
                                       on_start=record.started, on_progress=tick,
                                       progress_interval_s=PROGRESS_INTERVAL_S)
        except BaseException:
            if record.pid is not None:
                store.finish_run(run_id, "cancelled", None, None)
            raise
        if isinstance(outcome, ForkRefused):
            if outcome.declined:
                return None
            warm_interpreters.refused(server, outcome)
            if outcome.stale:
                continue
            return None
        store.finish_run(run_id, outcome.status, outcome.exit_code, outcome.signal_name)
        return RunResult(run_id, outcome, additions, stdout_path, stderr_path, forked_from=server.run_id)
    return None


@dataclass
class _ForkedRecord:
    """A forked run's row, written once the child exists (a refused fork leaves no row)."""

    store: Store
    case_id: str
    run_id: str
    tool: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    stdout_path: Path
    stderr_path: Path
    server: WarmServer
    pid: int | None = None

    def started(self, pid: int) -> None:
        self.server.forked += 1
        self.store.start_run(self.case_id, self.tool, self.argv, self.cwd, self.env, str(self.stdout_path),
                             str(self.stderr_path), os.getpid(), run_id=self.run_id)
        self.store.set_run_pid(self.run_id, pid)
        self.pid = pid


def coverage_path(store: Store) -> Path | None:
    """A folder holding only the server's coverage package (a link to it), for the spectrum probe to append
    to sys.path in an interpreter that lacks coverage: the server's whole site-packages would shadow the
    case's own torch. The C tracer inside it loads only into the same Python version; another falls back to
    coverage's Python tracer (slower, same lines)."""
    try:
        import coverage
    except ImportError:
        return None
    folder = store.state_dir / "coverage-path"
    link = folder / "coverage"
    if not link.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            link.symlink_to(Path(coverage.__file__).parent, target_is_directory=True)
    return folder


def with_spectrum(store: Store, argv: list[str], out: Path, *, none_returns: bool = False,
                  fx_writers: bool = False) -> list[str]:
    """argv (`python script.py ...`) run under the spectrum probe, which writes the lines of torch's compiler
    that ran to `out` (json) as the run exits (`none_returns`: and the functions that returned a None of their
    own before its exception; `fx_writers`: and which functions of torch/fx wrote the generated code that
    raised); the run's outcome and output are its own."""
    extra = coverage_path(store)
    probe = [str(SPECTRUM_PROBE), "--out", str(out), *(["--coverage-path", str(extra)] if extra else []),
             *(["--none-returns"] if none_returns else []), *(["--fx-writers"] if fx_writers else []), "--"]
    return [argv[0], *probe, *argv[1:]]


def python_argv(case: CaseRecord, script: Path, args: list[str] | None = None) -> list[str]:
    return [case.python, str(script), *(args or [])]


def recover_interrupted(store: Store) -> list[str]:
    """Mark runs whose server died as interrupted and kill what is left of their process groups."""
    recovered = []
    for run in store.running_runs():
        if run.server_pid == os.getpid() or (run.server_pid is not None and process_alive(run.server_pid)):
            continue  # its server is still running it
        if run.pid is not None and group_alive(run.pid):
            wait_gone(kill_tree(run.pid))
        store.finish_run(run.run_id, "interrupted", None, None)
        recovered.append(run.run_id)
    return recovered
