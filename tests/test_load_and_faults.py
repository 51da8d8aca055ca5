"""Load and faults: concurrent calls on one server, a server killed mid-run, damaged stores and cases."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from conftest import process_running
from mcp import Client, StdioServerParameters

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.mcp_server.server import create_server
from pt2_bug_basher.steps.environment import start_case

pytestmark = pytest.mark.anyio

FAST_FAIL = """
import sys
marker = {marker!r}
print("stdout of", marker)
raise RuntimeError("boom from " + marker)
"""


@pytest.fixture
def loaded(workspace: Path):
    config = ServerConfig(state_dir=workspace / "state", default_repo=workspace / "repo", allowed_roots=(workspace,))
    case = anyio.run(lambda: start_case(Store(config.state_dir), config.default_repo, python=sys.executable))
    return config, case.case_id


async def test_eight_concurrent_runs_and_two_hundred_classifications(loaded):
    config, case_id = loaded
    repo = config.default_repo
    scripts = []
    for i in range(8):
        path = repo / f"fail_{i}.py"
        path.write_text(FAST_FAIL.format(marker=f"script-{i}"))
        scripts.append(path)
    server = create_server(config)
    texts = [f"Traceback (most recent call last):\n  File \"u{i}.py\", line {i + 1}, in f\n"
             f"torch._dynamo.exc.Unsupported: marker {i}\n" if i % 2 else
             f"torch._dynamo.exc.FailOnRecompileLimitHit: recompile_limit reached marker {i}\n" for i in range(200)]
    runs: dict[int, dict] = {}
    classified: dict[int, dict] = {}
    async with Client(server) as client:
        async def run(i: int) -> None:
            result = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(scripts[i]),
                                                              "repeat": 1})
            runs[i] = result.structured_content

        async def classify(i: int) -> None:
            result = await client.call_tool("classify_error", {"text": texts[i]})
            classified[i] = result.structured_content

        async with anyio.create_task_group() as group:
            for i in range(8):
                group.start_soon(run, i)
            for i in range(200):
                group.start_soon(classify, i)
    for i, data in runs.items():
        run_id = data["runs"][0]["run_id"]
        assert data["failure"]["message"].startswith(f"boom from script-{i}")
        record = server.state.store.get_run(run_id, case_id)
        assert record.argv[-1] == str(scripts[i]) and record.status == "finished" and record.exit_code == 1
        assert f"stdout of script-{i}" in Path(record.stdout_path).read_text()
    assert len(runs) == 8 and len({d["runs"][0]["run_id"] for d in runs.values()}) == 8
    for i, data in classified.items():
        assert data["category"] == ("graph_break" if i % 2 else "recompile"), (i, data["category"])
        assert f"marker {i}" in " ".join(e["text"] for e in data["evidence"])
    assert len(classified) == 200
    with sqlite3.connect(config.state_dir / "cases.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        argvs = [json.loads(row[0]) for row in db.execute("SELECT argv_json FROM runs WHERE case_id = ?", (case_id,))]
    # One run per call; any other row is the warm interpreter those runs were forked from.
    assert sorted(a[-1] for a in argvs if a[-1].startswith(str(repo / "fail_"))) == sorted(map(str, scripts))
    assert all("forkserver.py" in a[1] for a in argvs if not a[-1].startswith(str(repo / "fail_")))


async def test_server_killed_mid_run_then_restarted(loaded):
    config, case_id = loaded
    repo = config.default_repo
    pid_file = repo / "child.pid"
    hang = repo / "hang.py"
    hang.write_text(
        "import os, subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pid_file)!r}, 'w').write(f'{{os.getpid()}} {{p.pid}}')\n"
        "time.sleep(600)\n"
    )
    finished = repo / "ok.py"
    finished.write_text("raise SystemExit(3)\n")
    env = {**os.environ}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pt2_bug_basher", "serve", "--state-dir", str(config.state_dir), "--repo", str(repo),
              "--root", str(config.default_repo.parent)],
        env=env,
    )
    from mcp.shared.exceptions import MCPError

    server_pid = None
    client = Client(params)
    await client.__aenter__()
    try:
        done = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(finished), "repeat": 1})
        done_run = done.structured_content["runs"][0]["run_id"]
        async with anyio.create_task_group() as group:
            async def long_call() -> None:
                with pytest.raises(MCPError, match="Connection closed"):
                    await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(hang), "repeat": 1})

            group.start_soon(long_call)
            with anyio.fail_after(60):
                while not pid_file.exists() or not pid_file.read_text().strip():
                    await anyio.sleep(0.1)
            store = Store(config.state_dir)
            running = store.running_runs()
            hanging = [r for r in running if r.argv[-1] == str(hang)]
            # Besides the hanging run, only the warm interpreter it was forked from may be running.
            assert len(hanging) == 1 and all(r in hanging or "forkserver.py" in r.argv[1] for r in running)
            server_pid = hanging[0].server_pid
            os.kill(server_pid, signal.SIGKILL)
    finally:
        with anyio.move_on_after(10):
            with contextlib.suppress(Exception):  # the server is gone: closing its pipes may fail
                await client.__aexit__(None, None, None)
    script_pid, child_pid = map(int, pid_file.read_text().split())
    # Restart on the same state directory: once the server runs (its lifespan), the run is marked
    # interrupted and its processes are gone.
    again = create_server(config)
    # In a thread of its own: this task's client was torn down with its server killed under it.
    restart = threading.Thread(target=lambda: anyio.run(_connect, again))
    restart.start()
    restart.join(60)
    store = again.state.store
    runs = {r.run_id: r for r in store.runs(case_id)}
    interrupted = [r for r in runs.values() if r.status == "interrupted"]
    assert [r.argv[-1] for r in interrupted if "forkserver.py" not in r.argv[1]] == [str(hang)]
    assert not any(process_running(r.pid) for r in interrupted if r.pid is not None)
    assert runs[done_run].status == "finished" and runs[done_run].exit_code == 3
    assert not process_running(script_pid) and not process_running(child_pid)
    assert store.get_case(case_id).python == sys.executable


async def _connect(server) -> None:
    async with Client(server) as client:
        await client.list_tools()


async def test_corrupt_store_is_a_clear_error(workspace: Path):
    state = workspace / "state"
    state.mkdir()
    (state / "cases.sqlite3").write_bytes(b"this is not a database" * 100)
    config = ServerConfig(state_dir=state, default_repo=workspace / "repo", allowed_roots=(workspace,))
    from pt2_bug_basher.case.store import StoreError

    with pytest.raises(StoreError, match="move it aside"):
        create_server(config)


async def test_locked_store_waits_then_errors_clearly(loaded):
    config, case_id = loaded
    server = create_server(config)
    store = server.state.store
    store.busy_timeout_s = 1.0
    holder = sqlite3.connect(config.state_dir / "cases.sqlite3", timeout=1, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        async with Client(server) as client:
            started = time.monotonic()
            result = await client.call_tool("waive_step", {"case_id": case_id, "step": "reduce",
                                                           "reason": "locked store test reason"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.is_error and "locked" in result.content[0].text
    assert time.monotonic() - started < 30
    assert store.get_case(case_id).case_id == case_id
    assert store.waivers(case_id) == []


async def test_deleted_case_directory_is_recreated_for_new_runs(loaded):
    config, case_id = loaded
    script = config.default_repo / "f.py"
    script.write_text("raise ValueError('x')\n")
    server = create_server(config)
    async with Client(server) as client:
        first = (await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(script), "repeat": 1}))
        import shutil

        shutil.rmtree(config.state_dir / "cases" / case_id)
        second = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(script), "repeat": 1})
        try:
            await client.read_resource(first.structured_content["runs"][0]["stderr"])
            missing_error = None
        except Exception as exc:  # the SDK raises MCPError for a resource error
            missing_error = str(exc)
    assert not second.is_error and second.structured_content["runs"][0]["failed"]
    assert missing_error and "gone" in missing_error
    assert json.loads(json.dumps(server.state.workflow(case_id).status().model_dump()))["case_id"] == case_id


async def test_a_full_disk_while_writing_a_log_is_reported_and_nothing_else_is_lost(loaded):
    """A file-size cap on the server (RLIMIT_FSIZE, SIGXFSZ ignored) makes log writes fail as a full disk would."""
    config, case_id = loaded
    repo = config.default_repo
    loud = repo / "loud.py"
    loud.write_text("import sys\nsys.stdout.write('y' * (6 * 1024 * 1024))\nraise RuntimeError('loud failure')\n")
    cap = 2 * 1024 * 1024
    launcher = (
        "import os, resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({cap}, {cap}))\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'pt2_bug_basher', *sys.argv[1:]])\n"
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", launcher, "serve", "--state-dir", str(config.state_dir), "--repo", str(repo)],
        env=dict(os.environ),
    )
    async with Client(params) as client:
        result = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(loud), "repeat": 1})
        assert not result.is_error, result.content[0].text
        data = result.structured_content
        assert any("could not be fully written" in note and "File too large" in note for note in data["notes"])
        assert data["runs"][0]["failed"] and data["failure"]["message"].startswith("loud failure")
        status = await client.call_tool("get_workflow", {"case_id": case_id})
        assert not status.is_error
    store = Store(config.state_dir)
    run = store.get_run(data["runs"][0]["run_id"], case_id)
    assert run.status == "finished" and run.exit_code == 1
    assert Path(run.stdout_path).stat().st_size <= cap
    assert store.get_case(case_id).case_id == case_id
