"""Candidate evaluators for the reducers: a pre-forked server or fresh processes.

Both run a script as `python script args` would (through `_probes/launcher.py`, whose report of
what compiled ends its stderr), write its stdout and stderr to files and return a `RunResult` that
the case's oracle (`analysis.compare.Oracle`) judges. The fork server is one recorded run
(`runs.execute`) whose children are forked from an interpreter that has imported torch already;
the fresh evaluator starts one process per candidate with `runner.run_process`. Either way,
cancelling the caller kills every child (the server's group and its descendants), and a candidate
past its timeout is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from pathlib import Path

import anyio

from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.domain.errors import BugBasherError
from pt2_bug_basher.execution.cpus import usable_cpus
from pt2_bug_basher.execution.runner import ProcessOutcome, run_process
from pt2_bug_basher.execution.runs import BASE_ENV, LAUNCHER, PROBES, RunResult, execute
from pt2_bug_basher.execution.warm import code_without_comments
from pt2_bug_basher.reduce.ladder import Reference, fake_result

FORKSERVER = PROBES / "forkserver.py"
START_TIMEOUT_S = 120.0


class Evaluator:
    """Runs a script and returns its RunResult; `parallel` runs at once."""

    kind = "base"
    parallel = 1

    async def run(self, script: Path, args: list[str], *, cwd: Path, out_dir: Path, timeout_s: float,
                  extra_path: list[str] | None = None, env: dict[str, str] | None = None) -> RunResult:
        """env: variables read at call time (TORCHDYNAMO_DISABLE), set for this run only."""
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


class FreshEvaluator(Evaluator):
    """One new interpreter per candidate (the reference behaviour)."""

    kind = "fresh processes"

    def __init__(self, case: CaseRecord, env: dict[str, str], parallel: int | None = None) -> None:
        self.case = case
        self.env = {**os.environ, **BASE_ENV, **env}
        self.parallel = parallel or usable_cpus()

    async def run(self, script, args, *, cwd, out_dir, timeout_s, extra_path=None, env=None):
        out_dir.mkdir(parents=True, exist_ok=True)
        env = {**self.env, **(env or {})}
        if extra_path:
            env["PYTHONPATH"] = os.pathsep.join([*extra_path, *filter(None, [env.get("PYTHONPATH")])])
        argv = [self.case.python, str(LAUNCHER), "--no-mark", "--", str(script), *args]
        outcome = await run_process(argv, cwd=cwd, env=env, timeout_s=timeout_s,
                                    stdout_path=out_dir / "stdout.log", stderr_path=out_dir / "stderr.log")
        return fake_result(f"candidate-{out_dir.name}", outcome, out_dir / "stdout.log", out_dir / "stderr.log")


_CUDA_RE = re.compile(r"""\bcuda\b|type=['"]cuda['"]""")


def case_cuda_available(case: CaseRecord) -> bool | None:
    """Whether the case's torch can use CUDA, as the environment probe found (None: not known)."""
    found = (case.env.get("torch") or {}).get("cuda_available")
    return found if isinstance(found, bool) else None


def fork_unsafe(code: str, *, cuda_available: bool | None) -> bool:
    """Trials of code that runs on CUDA run in fresh processes: a process that initialised CUDA is never forked.

    The code runs on CUDA when the case's torch can use CUDA at all (`cuda_available`, from the environment
    probe; None when unknown) and its own code, comments left out, puts tensors on a CUDA device. Seen on
    an H200: forked trials of a CUDA graph drifted (PyTorch's minifier went 7 -> 2 nodes and the result no
    longer failed) where fresh-process trials stayed on the failure (3 nodes, failing).
    """
    if cuda_available is False:
        return False
    return _CUDA_RE.search(code_without_comments(code)) is not None


class ForkServerEvaluator(Evaluator):
    """Children forked from one interpreter that imported torch once (start with `start`)."""

    kind = "fork server"

    def __init__(self, store: Store, case: CaseRecord, env: dict[str, str], work_dir: Path,
                 parallel: int | None = None, preload: tuple[str, ...] = ("torch",), tool: str = "minify") -> None:
        self.store, self.case, self.env, self.work_dir = store, case, env, work_dir
        self.parallel = parallel or usable_cpus()
        self.preload = preload
        self.tool = tool
        # AF_UNIX paths are limited to ~100 bytes: keep the socket name short.
        self.socket_path = Path("/tmp") / f"pt2bb-{os.getpid()}-{time.monotonic_ns() % 10**9}.sock"
        self.run_id: str | None = None
        self._scope: anyio.CancelScope | None = None
        self._done = anyio.Event()
        self._failure: str | None = None

    async def start(self, task_group, progress=None) -> None:
        """Start the server as a recorded run in task_group; returns once it accepts requests."""
        argv = [self.case.python, str(FORKSERVER), str(self.socket_path), *self.preload]
        self.work_dir.mkdir(parents=True, exist_ok=True)

        async def serve() -> None:
            with anyio.CancelScope() as scope:
                self._scope = scope
                try:
                    result = await execute(self.store, self.case, argv, tool=self.tool, cwd=self.work_dir,
                                           env_add=self.env, timeout_s=4 * 3600.0, progress=None,
                                           label="fork server")
                    self.run_id = result.run_id
                    if result.outcome.exit_code not in (0, None):
                        self._failure = result.stderr_text(4000)
                finally:
                    self._done.set()

        task_group.start_soon(serve)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.socket_path.exists():
            if self._done.is_set():
                raise BugBasherError(f"the fork server exited at start: {self._failure or 'no output'}")
            if time.monotonic() > deadline:
                if self._scope is not None:
                    self._scope.cancel()
                raise BugBasherError("the fork server did not start within 120 s")
            await anyio.sleep(0.05)

    async def run(self, script, args, *, cwd, out_dir, timeout_s, extra_path=None, env=None,
                  options: dict | None = None):
        """options: more request fields (backend, env, bisect_trace; see forkserver.py)."""
        if env:
            options = {**(options or {}), "env": {**(options or {}).get("env", {}), **env}}
        out_dir.mkdir(parents=True, exist_ok=True)
        stdout, stderr = out_dir / "stdout.log", out_dir / "stderr.log"
        request = {"script": str(script), "args": list(args), "cwd": str(cwd), "stdout": str(stdout),
                   "stderr": str(stderr), "timeout": timeout_s, "path": list(extra_path or []), **(options or {})}
        started = time.monotonic()
        with anyio.fail_after(timeout_s + 30):
            async with await anyio.connect_unix(str(self.socket_path)) as stream:
                await stream.send((json.dumps(request) + "\n").encode())
                buf = b""
                while b"\n" not in buf:
                    try:
                        buf += await stream.receive(65536)
                    except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                        raise BugBasherError("the fork server went away during a candidate run") from exc
        reply = json.loads(buf.split(b"\n", 1)[0])
        exit_code = reply["exit_code"]
        outcome = ProcessOutcome(
            argv=[str(script), *args], exit_code=None if reply["timed_out"] else exit_code,
            signal_name=reply.get("signal"), timed_out=bool(reply["timed_out"]), cancelled=False,
            duration_s=time.monotonic() - started, pid=reply["pid"], stdout_path=stdout, stderr_path=stderr,
            stdout_bytes=_size(stdout), stderr_bytes=_size(stderr),
        )
        return fake_result(f"candidate-{out_dir.name}", outcome, stdout, stderr)

    async def aclose(self) -> None:
        if self._done.is_set():
            return
        try:
            with anyio.fail_after(5):
                async with await anyio.connect_unix(str(self.socket_path)) as stream:
                    await stream.send(b'{"shutdown": true}\n')
                await self._done.wait()
        except (OSError, TimeoutError):
            if self._scope is not None:
                self._scope.cancel()
        finally:
            with contextlib.suppress(OSError):
                self.socket_path.unlink()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def reference_env(ref: Reference) -> dict[str, str]:
    return dict(ref.env)
