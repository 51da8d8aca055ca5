"""Shared fixtures: real servers on temporary state, real venvs, real MCP clients."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import venv
from pathlib import Path

import pytest
from mcp import Client

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.mcp_server.calls import check_result, input_schemas
from pt2_bug_basher.mcp_server.server import create_server

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / "examples"

# The small-repository fixtures (mini, mini_branch_bug), and the fast tier (`-m "not slow"`), for every module.
pytest_plugins = ["conftest_checkout", "conftest_tiers"]


@pytest.fixture(scope="session", autouse=True)
def private_model_cache(tmp_path_factory: pytest.TempPathFactory):
    """Fitted text models go to the test run's own cache (shared by xdist workers), not the user's."""
    from pt2_bug_basher.case.config import CACHE_DIR_ENV

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    previous = os.environ.get(CACHE_DIR_ENV)
    os.environ[CACHE_DIR_ENV] = str(shared / "model-cache")
    yield
    if previous is None:
        os.environ.pop(CACHE_DIR_ENV, None)
    else:
        os.environ[CACHE_DIR_ENV] = previous


# --------------------------------------------------------------------------------------------
# Every call a tool's result names (next_step, diagnostic, ...) must be one the server takes:
# each structured result any test receives through mcp.Client.call_tool is checked.

_EMITTED_PROBLEMS: list[str] = []


@pytest.fixture(scope="session", autouse=True)
def emitted_calls_are_valid(tmp_path_factory: pytest.TempPathFactory):
    original = Client.call_tool
    schemas: dict[str, dict] = {}

    async def call_tool(self, name, arguments=None, *args, **kwargs):
        result = await original(self, name, arguments, *args, **kwargs)
        if result.structured_content and not result.is_error:
            if not schemas:
                root = tmp_path_factory.mktemp("schemas")
                schemas.update(await input_schemas(create_server(ServerConfig(root / "state", root, (root,)))))
            problems = check_result(name, result.structured_content, schemas)
            if problems:
                _EMITTED_PROBLEMS.extend(problems)
                raise AssertionError("a tool emitted calls the server does not take:\n" + "\n".join(problems))
        return result

    Client.call_tool = call_tool  # type: ignore[method-assign]
    yield
    Client.call_tool = original  # type: ignore[method-assign]


def _raise_swallowed_problems():
    """A test (or fixture) that caught the AssertionError above still fails."""
    try:
        result = yield
    except BaseException:
        _EMITTED_PROBLEMS.clear()
        raise
    problems, _EMITTED_PROBLEMS[:] = list(_EMITTED_PROBLEMS), []
    if problems:
        raise AssertionError("a tool emitted calls the server does not take:\n" + "\n".join(problems))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _raise_swallowed_problems())


def _dump_event_loop_tasks(thread_id: int) -> None:
    """The tasks of the event loop that `thread_id` runs, with what each awaits, to stderr: what a test about
    to time out waits on (pytest-timeout's dump shows only the loop's idle select)."""
    import asyncio

    from pt2_bug_basher.execution.stalls import task_chains

    frame = sys._current_frames().get(thread_id)
    while frame is not None and not isinstance(frame.f_locals.get("self"), asyncio.AbstractEventLoop):
        frame = frame.f_back
    if frame is not None:
        print("event loop tasks shortly before the timeout:", *task_chains(frame.f_locals["self"]), sep="\n",
              file=sys.stderr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker and marker.args else float(item.config.getini("timeout") or 0)
    watchdog = threading.Timer(max(1.0, limit - 20), _dump_event_loop_tasks, (threading.get_ident(),))
    watchdog.daemon = True
    if limit:
        watchdog.start()
    try:
        return (yield from _raise_swallowed_problems())
    finally:
        watchdog.cancel()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A repository directory and a state directory under one allowed root."""
    (tmp_path / "repo").mkdir()
    return tmp_path


@pytest.fixture
def config(workspace: Path) -> ServerConfig:
    return ServerConfig(
        state_dir=workspace / "state", default_repo=workspace / "repo", allowed_roots=(workspace,)
    )


@pytest.fixture
def server(config: ServerConfig):
    return create_server(config)


@pytest.fixture(scope="session")
def venv_without_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real virtualenv with no torch in it."""
    root = tmp_path_factory.mktemp("notorch") / "venv"
    venv.EnvBuilder(with_pip=False).create(root)
    return root


@pytest.fixture(scope="session")
def this_venv() -> Path:
    """The virtualenv running the tests: a real one, with torch installed."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests must run inside a virtualenv that has torch")
    return Path(sys.prefix)


@pytest.fixture(scope="session")
def torch_version() -> str:
    from importlib.metadata import version

    return version("torch")


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def process_running(pid: int) -> bool:
    """True while pid exists and is not a zombie waiting for a reaper."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
