"""The process runner: timeouts kill whole trees, logs stay bounded, signals have names."""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from pt2_bug_basher.execution.runner import CappedLog, run_process

pytestmark = pytest.mark.anyio


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


SPAWNER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    pids = []
    for _ in range(2):
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        pids.append(p.pid)
    # One grandchild escapes into its own session, as a daemon would.
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    pids.append(p.pid)
    open(sys.argv[1], "w").write(" ".join(map(str, pids)))
    print("spawned", flush=True)
    time.sleep(300)
    """
)


async def test_timeout_kills_the_script_and_all_its_children(tmp_path: Path):
    script = tmp_path / "spawner.py"
    script.write_text(SPAWNER)
    pid_file = tmp_path / "pids"
    started = time.monotonic()
    outcome = await run_process(
        [sys.executable, str(script), str(pid_file)], cwd=tmp_path, env=dict(os.environ), timeout_s=3,
        stdout_path=tmp_path / "out", stderr_path=tmp_path / "err",
    )
    assert outcome.timed_out and outcome.status == "timeout"
    assert "timeout" in outcome.describe_exit()
    assert time.monotonic() - started < 15
    children = [int(p) for p in pid_file.read_text().split()]
    await anyio.sleep(0.2)
    assert not _alive(outcome.pid)
    assert [p for p in children if _alive(p)] == []
    assert set(children) <= set(outcome.killed_pids)
    assert (tmp_path / "out").read_text() == "spawned\n"


async def test_cancellation_kills_the_process_group(tmp_path: Path):
    script = tmp_path / "spawner.py"
    script.write_text(SPAWNER)
    pid_file = tmp_path / "pids"
    seen: list[int] = []
    with anyio.move_on_after(3):
        await run_process(
            [sys.executable, str(script), str(pid_file)], cwd=tmp_path, env=dict(os.environ), timeout_s=60,
            on_start=seen.append,
        )
    await anyio.sleep(0.5)
    children = [int(p) for p in pid_file.read_text().split()]
    assert seen and not _alive(seen[0])
    assert [p for p in children if _alive(p)] == []


@pytest.mark.parametrize("code,expected", [
    ("import ctypes; ctypes.string_at(0)", "SIGSEGV"),
    ("import os; os.abort()", "SIGABRT"),
])
async def test_exit_by_signal_is_named(tmp_path: Path, code: str, expected: str):
    outcome = await run_process([sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), timeout_s=30,
                                stderr_path=tmp_path / "err")
    assert outcome.signal_name == expected
    assert outcome.describe_exit() == f"killed by {expected}"
    assert outcome.exit_code is not None and outcome.exit_code < 0


async def test_stdin_is_closed(tmp_path: Path):
    outcome = await run_process(
        [sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], cwd=tmp_path, env=dict(os.environ),
        timeout_s=30, stdout_path=tmp_path / "out",
    )
    assert outcome.exit_code == 0 and (tmp_path / "out").read_text().strip() == "''"


async def test_200_mb_of_output_keeps_memory_flat_and_logs_capped(tmp_path: Path):
    code = ("import sys\nchunk = ('x' * 1023 + '\\n') * 1024\nfor i in range(200):\n    sys.stdout.write(chunk)\n"
            "print('THE END')")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome = await run_process(
        [sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), timeout_s=120,
        stdout_path=tmp_path / "out", log_cap=4 * 1024 * 1024,
    )
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert outcome.exit_code == 0
    assert outcome.stdout_bytes == 200 * 1024 * 1024 + len("THE END\n")
    log = (tmp_path / "out").read_bytes()
    assert len(log) < 4 * 1024 * 1024 + 200
    assert log.startswith(b"x" * 1023 + b"\n") and log.endswith(b"THE END\n")
    assert b"pt2-bug-basher cut" in log and outcome.stdout_cut > 190 * 1024 * 1024
    # The server holds at most the tail buffer (2x a 2 MiB tail) beyond its baseline, never the 200 MB.
    assert grown_kib < 40 * 1024, f"peak RSS grew by {grown_kib} KiB"


def test_capped_log_keeps_head_and_tail(tmp_path: Path):
    log = CappedLog(tmp_path / "f", cap=100)
    for i in range(100):
        log.write(f"{i:03d}\n".encode())
    log.close()
    text = (tmp_path / "f").read_text()
    assert text.startswith("000\n001\n") and text.endswith("098\n099\n")
    assert log.total == 400 and log.cut == 300
    assert "cut 300 bytes" in text


@pytest.mark.anyio
async def test_a_fork_server_that_never_answers_is_refused_not_waited_on(tmp_path: Path, monkeypatch):
    """A fork server that accepts a request and never forks: the run gives up after FORK_ANSWER_S and says so,
    and the descriptors it would have handed over are closed (no wait without a deadline)."""
    import socket

    from pt2_bug_basher.execution import runner

    monkeypatch.setattr(runner, "FORK_ANSWER_S", 1.0)
    path = tmp_path / "mute.sock"
    before = len(os.listdir("/proc/self/fd"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    started = time.monotonic()
    answer = await runner.run_forked(path, {"script": "x.py"}, argv=["x.py"], timeout_s=30,
                                     stdout_path=tmp_path / "out", stderr_path=tmp_path / "err")
    listener.close()
    assert isinstance(answer, runner.ForkRefused) and "did not answer within 1 s" in answer.reason, answer
    assert not answer.stale and time.monotonic() - started < 10
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.anyio
async def test_runs_cancelled_as_they_start_all_end(tmp_path: Path):
    """Cancelled at every moment of its start, a run ends at once and leaves no process: a cancellation that
    lands while the child's pipes are being set up must not wait for the child forever."""
    out, err = tmp_path / "out", tmp_path / "err"
    with anyio.fail_after(120):
        for attempt in range(120):
            with anyio.move_on_after(attempt * 0.0002):
                await run_process([sys.executable, "-c", "import time; time.sleep(5)"], cwd=tmp_path,
                                  env=dict(os.environ), timeout_s=30, stdout_path=out, stderr_path=err)
    mine = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, IndexError):
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == os.getpid() and b"time.sleep(5)" in (proc / "cmdline").read_bytes():
                mine.append(proc.name)
    assert not mine, mine  # every child was killed and reaped


@pytest.mark.anyio
async def test_a_run_cancelled_while_its_fork_server_answers_closes_only_its_own_descriptors(tmp_path: Path):
    """The write ends go to the fork server with the request and are closed once sent. A run cancelled while
    it waits for the answer must not close those numbers again: by then they may be another run's pipes
    (a cancelled ladder rung once closed a table read's stderr, whose start then waited forever)."""
    import socket
    import threading

    from pt2_bug_basher.execution import runner

    path = tmp_path / "slow.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    received, release = threading.Event(), threading.Event()

    def serve() -> None:  # takes the request and its descriptors, and does not answer
        conn, _ = listener.accept()
        _, fds, _, _ = socket.recv_fds(conn, 65536, 2)
        for fd in fds:  # free again, and the lowest free numbers, as the sender's were
            os.close(fd)
        received.set()
        release.wait(30)
        conn.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    others: list[int] = []
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(runner.run_forked, path, {"script": "x.py"}, argv=["x.py"], timeout_s=30,
                                           stdout_path=tmp_path / "out", stderr_path=tmp_path / "err"))
        with anyio.fail_after(10):
            while not received.is_set():
                await anyio.sleep(0.01)
        for _ in range(4):  # new pipes take the lowest free numbers: those of the write ends just sent
            others.extend(os.pipe())
        inodes = {fd: os.fstat(fd).st_ino for fd in others}
        group.cancel_scope.cancel()
    try:
        for fd, inode in inodes.items():
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_ino == inode:
                    continue
            pytest.fail(f"descriptor {fd}, a pipe of someone else, was closed by the cancelled run")
    finally:
        release.set()
        server.join(10)
        listener.close()
        for fd in others:
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.mark.anyio
async def test_task_chains_name_what_each_task_awaits():
    from pt2_bug_basher.execution.stalls import task_chains

    event = anyio.Event()

    async def waits_for_the_event() -> None:
        await event.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(waits_for_the_event)
        await anyio.sleep(0.01)
        lines = task_chains()
        event.set()
    at = next(i for i, line in enumerate(lines) if line.endswith(" waits_for_the_event"))
    assert lines[at].startswith("   ") and __file__ in lines[at], lines
    assert any(line.endswith(" wait") for line in lines[at + 1:]), lines  # and on into the event it awaits
