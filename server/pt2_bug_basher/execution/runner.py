"""The process runner shared by every tool that runs code.

A child runs in its own session (so its whole process group can be killed, Inductor's compile
workers included), with stdin closed. stdout and stderr stream to files as they arrive; each
log keeps its head and a bounded tail in memory, so memory stays flat whatever the child prints.
A timeout or a cancelled call kills the group and every descendant that left it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from pt2_bug_basher.domain.process import ProcessOutcome

DEFAULT_LOG_CAP = 8 * 1024 * 1024
KILL_GRACE_S = 2.0
# A fork server answers a request as soon as it has forked (or refused): one that has not within this long
# is treated as gone, so that no run waits on it without a deadline.
FORK_ANSWER_S = 60.0
_CHUNK = 64 * 1024


def signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


class CappedLog:
    """Writes a stream to a file, keeping at most `cap` bytes: the head, then the tail."""

    def __init__(self, path: Path, cap: int = DEFAULT_LOG_CAP) -> None:
        self.path = path
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.total = 0
        self._head_written = 0
        self._tail = bytearray()
        self._closed_cut: int | None = None
        self.error: str | None = None
        self._file = open(path, "wb")  # noqa: SIM115 - closed in close()

    def _put(self, data: bytes) -> None:
        """Write to the file; a full disk or a file-size cap stops the log, never the run."""
        if self.error is not None:
            return
        try:
            self._file.write(data)
            self._file.flush()
        except OSError as exc:
            self.error = f"{self.path.name}: {exc.strerror or exc} after {self._head_written} bytes"

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - self._head_written
        if room > 0:
            head, data = data[:room], data[room:]
            self._put(head)
            self._head_written += len(head)
        if data:
            self._tail += data
            if len(self._tail) > 2 * self.tail_cap:
                del self._tail[: len(self._tail) - self.tail_cap]

    @property
    def cut(self) -> int:
        if self._closed_cut is not None:
            return self._closed_cut
        return max(0, self.total - self._head_written - min(len(self._tail), self.tail_cap))

    def close(self) -> None:
        tail = bytes(self._tail[-self.tail_cap :]) if self._tail else b""
        self._closed_cut = self.cut
        if self.cut:
            self._put(f"\n[... pt2-bug-basher cut {self.cut} bytes here ...]\n".encode())
        self._put(tail)
        try:
            self._file.close()
        except OSError as exc:
            self.error = self.error or f"{self.path.name}: {exc.strerror or exc}"
        self._tail = bytearray()


def _proc_stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, ...] (Linux)."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return fh.read().decode(errors="replace").rsplit(")", 1)[1].split()


def _descendants(root_pid: int) -> list[int]:
    """Every live descendant of root_pid, read from /proc (Linux); empty elsewhere."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            ppid = int(_proc_stat(int(entry))[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    stack = [root_pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_tree(pid: int) -> list[int]:
    """SIGKILL the process group led by pid and any descendant that left it. Returns pids hit."""
    victims = _descendants(pid)
    _signal_group(pid, signal.SIGKILL)
    for victim in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)
    return [pid, *victims]


def _exists(send_signal_0) -> bool:
    try:
        send_signal_0()
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(pgid: int) -> bool:
    return _exists(lambda: os.killpg(pgid, 0))


def process_alive(pid: int) -> bool:
    return _exists(lambda: os.kill(pid, 0))


def still_running(pid: int) -> bool:
    """True while pid exists and is not a zombie (a SIGKILLed process dies asynchronously)."""
    try:
        state = _proc_stat(pid)[0]
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        return process_alive(pid)
    return state not in ("Z", "X")


def wait_gone(pids: list[int], timeout_s: float = KILL_GRACE_S) -> list[int]:
    """Block until every pid has died (or timeout_s passed); the survivors."""
    deadline = time.monotonic() + timeout_s
    survivors = [pid for pid in pids if still_running(pid)]
    while survivors and time.monotonic() < deadline:
        time.sleep(0.02)
        survivors = [pid for pid in survivors if still_running(pid)]
    return survivors


def run_short_sync(argv: list[str], env: dict[str, str], timeout_s: float) -> str | None:
    """Run a quick helper command from synchronous code; its stdout, or None if it failed or timed out.

    Like every run, it gets its own session and, past the timeout, its whole group is killed.
    """
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, env=env, start_new_session=True, text=True)
    except OSError:
        return None
    try:
        out, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        killed = kill_tree(process.pid)
        process.communicate()
        wait_gone(killed)
        return None
    return out if process.returncode == 0 else None


async def _ticks(on_progress, interval_s: float, started: float) -> None:
    """Report the elapsed seconds every interval_s until cancelled (nothing without on_progress)."""
    if on_progress is None:
        return
    while True:
        await anyio.sleep(interval_s)
        await on_progress(time.monotonic() - started)

class _Child:
    """A child started with subprocess.Popen, waited for through a pidfd (a short poll where there is none).

    Not asyncio's subprocess transport: on Python 3.11 a task cancelled (or failing) while that transport
    connects its pipes waits for the process forever (CPython gh-103847, gh-125502), which hung localize."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.fds = [f.fileno() for f in (popen.stdout, popen.stderr) if f is not None]
        for fd in self.fds:
            os.set_blocking(fd, False)

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    async def wait(self) -> int:
        try:
            pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # no pidfd (an old kernel), or already reaped
            while self.popen.poll() is None:
                await anyio.sleep(0.02)
            return self.popen.returncode
        try:
            while self.popen.poll() is None:
                await anyio.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        return self.popen.returncode

    def close(self) -> None:
        for stream in (self.popen.stdout, self.popen.stderr):
            if stream is not None:
                stream.close()


async def _terminate(process: _Child) -> list[int]:
    """SIGTERM the group, give it a moment, then SIGKILL the group and stragglers."""
    victims = _descendants(process.pid)
    _signal_group(process.pid, signal.SIGTERM)
    with anyio.move_on_after(KILL_GRACE_S):
        await process.wait()
    killed = kill_tree(process.pid)
    for victim in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)
    with anyio.move_on_after(KILL_GRACE_S):
        await process.wait()
    hit = sorted(set(killed) | set(victims))
    await _await_gone(hit)
    return hit


async def _await_gone(pids: list[int]) -> None:
    """wait_gone for async callers: returns once each pid has died or KILL_GRACE_S passed."""
    with anyio.move_on_after(KILL_GRACE_S):
        while any(still_running(pid) for pid in pids):
            await anyio.sleep(0.02)


ProgressCallback = Callable[[float], Awaitable[None]]


def _outcome(argv: list[str], pid: int, exit_code: int | None, timed_out: bool, cancelled: bool, started: float,
             stdout_log: CappedLog | None, stderr_log: CappedLog | None, killed: list[int]) -> ProcessOutcome:
    logs = (stdout_log, stderr_log)
    return ProcessOutcome(
        argv=argv, exit_code=exit_code, signal_name=None if timed_out else signal_name(exit_code),
        timed_out=timed_out, cancelled=cancelled, duration_s=time.monotonic() - started, pid=pid,
        stdout_path=stdout_log.path if stdout_log else None, stderr_path=stderr_log.path if stderr_log else None,
        stdout_bytes=stdout_log.total if stdout_log else 0, stderr_bytes=stderr_log.total if stderr_log else 0,
        stdout_cut=stdout_log.cut if stdout_log else 0, stderr_cut=stderr_log.cut if stderr_log else 0,
        killed_pids=killed, log_errors=[log.error for log in logs if log is not None and log.error],
    )


async def _supervise(pumps: list[Callable[[], Coroutine[Any, Any, None]]], wait: Callable[[], Awaitable[object]],
                    stop: Callable[[], Awaitable[list[int]]], pid: int, timeout_s: float,
                    on_progress: ProgressCallback | None, interval_s: float, started: float) -> tuple[bool, list[int]]:
    """The one supervision of a child: its logs pumped while `wait` runs for at most timeout_s (progress
    ticks meanwhile); past it, `stop` kills it. Then whatever is left in its process group goes too, and
    reading stops soon after. Returns (timed out, the pids killed)."""
    timed_out, killed = False, []
    async with anyio.create_task_group() as readers:
        for pump in pumps:
            readers.start_soon(pump)
        async with anyio.create_task_group() as waiter:
            waiter.start_soon(_ticks, on_progress, interval_s, started)
            with anyio.move_on_after(timeout_s) as scope:
                await wait()
            if scope.cancelled_caught:
                timed_out = True
                killed = await stop()
            waiter.cancel_scope.cancel()
        if group_alive(pid):  # the child is gone; anything it left in its group (stray workers) goes too
            killed = sorted(set(killed) | set(kill_tree(pid)))
        await _await_gone(killed)
        # A grandchild in another session may still hold the pipes open: stop reading soon.
        readers.cancel_scope.deadline = anyio.current_time() + KILL_GRACE_S
    return timed_out, killed


async def run_process(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    stdout_path: Path | None = None,
    stderr_path: Path | None = None,
    log_cap: int = DEFAULT_LOG_CAP,
    on_start: Callable[[int], None] | None = None,
    on_progress: ProgressCallback | None = None,
    progress_interval_s: float = 10.0,
) -> ProcessOutcome:
    """Run argv to completion, a timeout or cancellation; always leaves no process behind.

    With no log paths, output is discarded (use run_captured for small captured output).
    """
    await anyio.lowlevel.checkpoint()
    started = time.monotonic()
    stdout_log = CappedLog(stdout_path, log_cap) if stdout_path else None
    stderr_log = CappedLog(stderr_path, log_cap) if stderr_path else None
    process = _Child(subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if stdout_log else subprocess.DEVNULL,
        stderr=subprocess.PIPE if stderr_log else subprocess.DEVNULL,
        cwd=cwd,
        env=env,
        start_new_session=True,
    ))
    if on_start is not None:
        on_start(process.pid)
    timed_out = False
    cancelled = False
    killed: list[int] = []
    logs = [log for log in (stdout_log, stderr_log) if log is not None]
    try:
        timed_out, killed = await _supervise(
            [functools.partial(_pump_fd, fd, log) for fd, log in zip(process.fds, logs, strict=True)],
            process.wait, functools.partial(_terminate, process), process.pid, timeout_s,
            on_progress, progress_interval_s, started)
    except BaseException:
        cancelled = True
        with anyio.CancelScope(shield=True):
            killed = await _terminate(process)
        raise
    finally:
        process.close()
        for log in logs:
            log.close()
    return _outcome(argv, process.pid, process.returncode, timed_out, cancelled, started, stdout_log, stderr_log,
                    killed)


@dataclass
class Captured:
    outcome: ProcessOutcome
    stdout: str
    stderr: str


async def run_captured(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float, scratch_dir: Path, cap: int = 1024 * 1024
) -> Captured:
    """Run a short helper process (a probe, git, pytest collection) and return its output as text."""
    scratch_dir.mkdir(parents=True, exist_ok=True)
    token = f"{os.getpid()}-{time.monotonic_ns()}"
    out_path = scratch_dir / f"captured-{token}.out"
    err_path = scratch_dir / f"captured-{token}.err"
    try:
        outcome = await run_process(
            argv, cwd=cwd, env=env, timeout_s=timeout_s, stdout_path=out_path, stderr_path=err_path, log_cap=cap
        )
        return Captured(
            outcome,
            out_path.read_text(errors="replace"),
            err_path.read_text(errors="replace"),
        )
    finally:
        for path in (out_path, err_path):
            path.unlink(missing_ok=True)


@dataclass
class Service:
    """A long-lived helper process (a warm interpreter) in its own session; `stop` kills its whole group."""

    process: subprocess.Popen

    @property
    def pid(self) -> int:
        return self.process.pid

    def exit_code(self) -> int | None:
        """None while it runs."""
        return self.process.poll()

    def stop(self) -> list[int]:
        """SIGKILL the group and its strays, wait until they are gone; the pids hit."""
        if self.process.poll() is not None and not group_alive(self.process.pid):
            return []
        killed = kill_tree(self.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=KILL_GRACE_S)
        wait_gone(killed)
        return killed


def start_service(argv: list[str], *, cwd: Path, env: dict[str, str], stdout_path: Path,
                  stderr_path: Path) -> Service:
    """Start argv in its own session with stdin closed and its output appended to files. The service must
    bound its own life (an idle timeout, its parent's death); `Service.stop` ends it early."""
    with open(stdout_path, "ab") as out, open(stderr_path, "ab") as err:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                   start_new_session=True)
    return Service(process)


@dataclass
class ForkRefused:
    """A warm interpreter did not fork: its sources changed (stale), CUDA is initialised or it is stopping,
    or (declined) this one run needs a new interpreter."""

    reason: str
    stale: bool = False
    declined: bool = False


async def _pump_fd(fd: int, log: CappedLog) -> None:
    try:
        while True:
            await anyio.wait_readable(fd)
            try:
                data = os.read(fd, _CHUNK)
            except BlockingIOError:
                continue
            if not data:
                return
            log.write(data)
    except (OSError, anyio.ClosedResourceError):
        return


async def _read_line(stream: anyio.abc.ByteStream, buffer: bytearray) -> dict | None:
    """The next JSON line from a fork server; None when it hung up first."""
    import json

    while b"\n" not in buffer:
        try:
            buffer += await stream.receive(65536)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return None
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return json.loads(line)


async def _ask_fork(stream: anyio.abc.UNIXSocketStream, buffer: bytearray, request: dict,
                    fds: tuple[int, int]) -> int | ForkRefused:
    """Send the request with the child's stdout and stderr (closed here once sent); the child's pid, or why
    the fork server did not fork."""
    import json

    try:
        await stream.send_fds((json.dumps(request) + "\n").encode(), list(fds))
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    first = await _read_line(stream, buffer)
    if first is None:  # it went away (stopping after its sources changed, or it died): try a new one
        return ForkRefused("the fork server hung up", stale=True)
    if "started" not in first:
        why = first.get("stale") or first.get("refused") or first.get("declined")
        return ForkRefused(str(why), stale="stale" in first, declined="declined" in first)
    return int(first["started"])


async def _connect(socket_path: Path) -> anyio.abc.UNIXSocketStream | ForkRefused:
    """A connection to the fork server, or why there is none (it accepts within FORK_ANSWER_S or not at all)."""
    with anyio.move_on_after(FORK_ANSWER_S):
        try:
            return await anyio.connect_unix(str(socket_path))
        except OSError as exc:
            return ForkRefused(f"the fork server does not answer: {exc}")
    return ForkRefused(f"the fork server did not accept the connection within {FORK_ANSWER_S:.0f} s")


async def run_forked(
    socket_path: Path,
    request: dict,
    *,
    argv: list[str],
    timeout_s: float,
    stdout_path: Path,
    stderr_path: Path,
    log_cap: int = DEFAULT_LOG_CAP,
    on_start: Callable[[int], None] | None = None,
    on_progress: ProgressCallback | None = None,
    progress_interval_s: float = 10.0,
) -> ProcessOutcome | ForkRefused:
    """Like run_process, for a child a fork server forks (`_probes/forkserver.py`, a warm request): its
    stdout and stderr are pipes read here into capped logs, a timeout or a cancelled call kills its whole
    group, and the exit status is the server's report of it. `argv` is what the child stands for."""
    started = time.monotonic()
    stdout_log, stderr_log = CappedLog(stdout_path, log_cap), CappedLog(stderr_path, log_cap)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    for fd in (out_r, err_r):
        os.set_blocking(fd, False)
    pid: int | None = None
    timed_out = cancelled = False
    killed: list[int] = []
    reply: dict | None = None
    try:
        stream = await _connect(socket_path)
        if isinstance(stream, ForkRefused):
            return stream
        async with stream:
            buffer = bytearray()
            answer: int | ForkRefused = ForkRefused(f"the fork server did not answer within {FORK_ANSWER_S:.0f} s")
            # _ask_fork owns the write ends from here and closes them, whatever happens: closed twice, their
            # numbers may already belong to another run's pipes (a cancelled rung once closed a table read's)
            handed, out_w, err_w = (out_w, err_w), -1, -1
            with anyio.move_on_after(FORK_ANSWER_S):
                answer = await _ask_fork(stream, buffer, {**request, "warm": True,
                                                          "timeout": timeout_s + 2 * KILL_GRACE_S}, handed)
            if isinstance(answer, ForkRefused):  # hanging up stops a child the server forks late
                return answer
            pid = answer
            if on_start is not None:
                on_start(pid)

            replies: list[dict | None] = []
            child = pid

            async def wait() -> None:
                replies.append(await _read_line(stream, buffer))

            async def stop() -> list[int]:  # the server still reports the killed child's status
                hit = kill_tree(child)
                with anyio.move_on_after(2 * KILL_GRACE_S):
                    await wait()
                return hit

            timed_out, killed = await _supervise(
                [functools.partial(_pump_fd, out_r, stdout_log), functools.partial(_pump_fd, err_r, stderr_log)],
                wait, stop, pid, timeout_s, on_progress, progress_interval_s, started)
            reply = replies[-1] if replies else None
    except BaseException:
        cancelled = True
        if pid is not None:
            with anyio.CancelScope(shield=True):
                killed = kill_tree(pid)
                await _await_gone(killed)
        raise
    finally:
        for fd in (out_r, err_r, out_w, err_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        stdout_log.close()
        stderr_log.close()
    exit_code = None if reply is None else reply.get("exit_code")
    if timed_out or (reply is not None and reply.get("timed_out")):
        timed_out, exit_code = True, None
    assert pid is not None
    return _outcome(argv, pid, exit_code, timed_out, cancelled, started, stdout_log, stderr_log, killed)
