"""Shared fixtures: real servers on temporary state, real venvs, real MCP clients."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.mcp_server.server import create_server

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / "examples"

# The small-repository fixtures (mini, mini_branch_bug) for every test module.
pytest_plugins = ["conftest_checkout"]


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
