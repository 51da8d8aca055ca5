"""The foundation through real MCP clients: tools/list, skill, check_env, gates, the shared store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.workflow import STEPS, TOOL_REQUIRES
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.mcp_server.server import create_server
from pt2_bug_basher.mcp_server.tools import registered_modules

pytestmark = pytest.mark.anyio


async def open_case(client: Client) -> str:
    result = await client.call_tool("check_env", {"python": sys.executable})
    assert not result.is_error, result.content
    case_id = result.structured_content["case_id"]
    assert case_id
    return case_id


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_tools_list_has_annotations_and_output_schemas(server, mode):
    async with Client(server, mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == set(registered_modules())
        assert {"check_env", "get_workflow", "waive_step"} <= set(tools)
        for tool in tools.values():
            assert tool.annotations is not None, tool.name
            assert tool.annotations.read_only_hint is not None, tool.name
            assert tool.output_schema and tool.output_schema.get("properties"), tool.name
            assert "next_step" in tool.output_schema["properties"], tool.name
            assert tool.description and len(tool.description) > 40, tool.name
        assert tools["get_workflow"].annotations.read_only_hint is True
        assert tools["check_env"].annotations.read_only_hint is False
        assert client.instructions and len(client.instructions.encode()) < 2048
        assert "check_env" in client.instructions and "celebrate" in client.instructions


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_skill_as_prompt_resource_and_tool(server, mode):
    skill_md = (Path(__file__).resolve().parents[1] / "skill" / "SKILL.md").read_text()
    async with Client(server, mode=mode) as client:
        resource = await client.read_resource("skill://pt2-bug-basher/SKILL.md")
        assert resource.contents[0].text == skill_md
        prompt = await client.get_prompt("pt2-bug-basher", {"error_text": "torch._dynamo.exc.Unsupported: boom"})
        text = prompt.messages[0].content.text
        assert "torch._dynamo.exc.Unsupported: boom" in text
        assert "register_test" in text and "make_worktree" in text
        workflow = await client.call_tool("get_workflow", {})
        assert not workflow.is_error
        body = workflow.structured_content["skill"]
        assert body.strip() and body.strip() in skill_md
        assert not body.startswith("---")


async def test_check_env_reports_the_real_torch_of_a_real_venv(server, this_venv, torch_version):
    async with Client(server) as client:
        result = await client.call_tool("check_env", {"python": str(this_venv / "bin" / "python")})
        data = result.structured_content
        # The TORCH_LOGS names are counted; the full list is a resource the server serves.
        names = data["torch"]["torch_logs"]
        assert names["resource"] == f"case://{data['case_id']}/torch-logs"
        listed = json.loads((await client.read_resource(names["resource"])).contents[0].text)
        with pytest.raises(MCPError, match="unknown case_id"):
            await client.read_resource("case://case-nope/torch-logs")
    assert not result.is_error and data["ok"] is True
    assert data["torch"]["version"] == torch_version
    assert data["torch"]["git_version"]
    assert Path(data["torch"]["file"]).is_relative_to(this_venv)
    assert data["torch"]["imported_from_repo"] is False
    # the server's default repository is no PyTorch checkout: the warning says what that leaves out
    assert data["warnings"] and "is not a PyTorch checkout" in data["warnings"][0]
    assert "develop build" not in json.dumps(data["warnings"])
    assert "log_artifacts" not in data["torch"] and "log_components" not in data["torch"]
    assert "graph_breaks" not in json.dumps(data)
    assert listed["source"] == "registered by the case's torch" and listed["torch"] == torch_version
    assert "graph_breaks" in listed["artifacts"] and "dynamo" in listed["components"]
    assert (names["components"], names["artifacts"]) == (len(listed["components"]), len(listed["artifacts"]))
    assert names["artifacts"] > 20 and listed["presets"]["graph_break"] == "graph_breaks"
    assert data["rule"] == "explicit python argument"
    assert data["case_id"].startswith("case-")
    assert "run_with_logs" in data["next_step"] and data["case_id"] in data["next_step"]


async def test_check_env_warns_of_an_installed_torch_only_for_a_pytorch_checkout(server, workspace, this_venv):
    checkout = workspace / "pytorch"
    (checkout / "torch").mkdir(parents=True)
    (checkout / "torch" / "__init__.py").write_text("")
    async with Client(server) as client:
        result = await client.call_tool("check_env", {"python": str(this_venv / "bin" / "python"),
                                                      "repo": str(checkout)})
    data = result.structured_content
    assert data["ok"] is True and data["torch"]["imported_from_repo"] is False
    assert "not from the repository" in data["warnings"][0] and "develop build" in data["warnings"][0]


async def test_check_env_warns_when_the_test_harness_cannot_be_imported(server, workspace):
    """An interpreter with torch but no expecttest: torch's TestCase cannot be imported there, so the unit-test
    steps would fail at collection; check_env says so with the install command, before any test is written."""
    import sysconfig
    import venv

    env_dir = workspace / "no-expecttest"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "ours.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (Path(purelib) / "zz_block.pth").write_text("import sys; sys.modules['expecttest'] = None\n")
    assert subprocess.run([str(python), "-c", "import expecttest"], capture_output=True).returncode != 0
    async with Client(server) as client:
        data = (await client.call_tool("check_env", {"python": str(python)})).structured_content
    assert data["ok"] is True, data
    [warning] = [w for w in data["warnings"] if "expecttest" in w]
    # only what is missing is installed
    assert warning.endswith(f"{python} -m pip install expecttest") and "register_test" in warning, warning


async def test_check_env_without_torch_is_not_ok_and_opens_no_case(server, venv_without_torch):
    async with Client(server) as client:
        result = await client.call_tool("check_env", {"python": str(venv_without_torch / "bin" / "python")})
        data = result.structured_content
        assert data["ok"] is False and data["case_id"] is None
        assert "No module named 'torch'" in data["import_error"]
        assert "check_env" in data["next_step"]
    assert server.state.store.list_cases() == []


async def test_check_env_follows_conda_variables_to_a_real_venv(server, this_venv, monkeypatch, torch_version):
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.setenv("CONDA_PREFIX", str(this_venv))
    monkeypatch.setenv("CONDA_DEFAULT_ENV", "pt2dev")
    monkeypatch.delenv("CONDA_EXE", raising=False)
    async with Client(server) as client:
        named = (await client.call_tool("check_env", {"conda_env": "pt2dev"})).structured_content
        active = (await client.call_tool("check_env", {})).structured_content
        missing = await client.call_tool("check_env", {"conda_env": "nope"})
    assert named["ok"] and named["python"] == str(this_venv / "bin" / "python")
    assert "pt2dev" in named["rule"] and "CONDA" in named["rule"]
    assert named["torch"]["version"] == torch_version and named["ask_user"] is None
    assert active["python"] == str(this_venv / "bin" / "python") and "active conda env" in active["rule"]
    assert missing.is_error and "no environment named 'nope'" in missing.content[0].text
    assert "pt2dev" in missing.content[0].text


async def test_no_active_env_asks_the_user(server, monkeypatch):
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "CONDA_EXE"):
        monkeypatch.delenv(name, raising=False)
    async with Client(server) as client:
        data = (await client.call_tool("check_env", {})).structured_content
    assert data["rule"].startswith("no env active or named")
    assert data["ask_user"] and "Ask the user" in data["ask_user"]
    assert data["next_step"].startswith("First ask the user")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_elicitation_picks_the_environment(server, monkeypatch, this_venv, mode):
    from mcp_types import ElicitResult

    for name in ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "CONDA_EXE"):
        monkeypatch.delenv(name, raising=False)
    asked: list[str] = []

    async def answer(context, params):
        asked.append(params.message)
        return ElicitResult(action="accept", content={"python": str(this_venv / "bin" / "python"), "conda_env": ""})

    async with Client(server, elicitation_callback=answer, mode=mode) as client:
        data = (await client.call_tool("check_env", {})).structured_content
    assert asked and "Which environment" in asked[0]
    assert data["rule"] == "explicit python argument" and data["ok"]


async def test_a_case_is_visible_to_a_second_server_on_the_same_store(config):
    first, second = create_server(config), create_server(config)
    async with Client(first) as client:
        case_id = await open_case(client)
        waived = await client.call_tool(
            "waive_step", {"case_id": case_id, "step": "reduce", "reason": "the repro is already five lines"}
        )
        assert not waived.is_error
    async with Client(second) as client:
        status = (await client.call_tool("get_workflow", {"case_id": case_id})).structured_content["case"]
    by_step = {s["step"]: s for s in status["steps"]}
    assert by_step["environment"]["status"] == "done"
    assert by_step["reduce"]["status"] == "waived"
    assert status["waivers"] == [{"step": "reduce", "reason": "the repro is already five lines"}]
    assert "run_with_logs" in status["next_step"]


async def test_unknown_case_and_bad_waivers_are_tool_errors(server):
    async with Client(server) as client:
        unknown = await client.call_tool("get_workflow", {"case_id": "case-nope"})
        assert unknown.is_error and "check_env()" in unknown.content[0].text
        case_id = await open_case(client)
        short = await client.call_tool("waive_step", {"case_id": case_id, "step": "reduce", "reason": "x"})
        assert short.is_error and "reason" in short.content[0].text
        env = await client.call_tool("waive_step", {"case_id": case_id, "step": "environment", "reason": "x" * 20})
        assert env.is_error and "cannot be waived" in env.content[0].text
        bogus = await client.call_tool("waive_step", {"case_id": case_id, "step": "bogus", "reason": "x" * 20})
        assert bogus.is_error
        outside = await client.call_tool("check_env", {"python": sys.executable, "repo": "/"})
        assert outside.is_error and "outside the allowed roots" in outside.content[0].text
        not_python = await client.call_tool("check_env", {"python": "/bin/rm"})
        assert not_python.is_error and "does not look like a Python interpreter" in not_python.content[0].text
        from pt2_bug_basher.execution.environment import PROBE

        assert PROBE.exists()


def test_workflow_table_is_complete_and_ordered():
    assert [s.number for s in STEPS] == list(range(1, 14))
    assert {s.step for s in STEPS} == set(Step)
    for tool, steps in TOOL_REQUIRES.items():
        assert isinstance(tool, ToolName) and all(isinstance(s, Step) for s in steps)


async def test_stdio_against_the_installed_console_script(workspace):
    from mcp import StdioServerParameters

    script = Path(sys.executable).parent / "pt2-bug-basher"
    assert script.exists(), "install the package first (pip install -e .)"
    params = StdioServerParameters(
        command=str(script),
        args=["serve", "--state-dir", str(workspace / "state"), "--repo", str(workspace / "repo")],
        env={**os.environ},
    )
    async with Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "check_env" in names
        result = await client.call_tool("check_env", {"python": sys.executable})
        assert result.structured_content["ok"] is True
        case_id = result.structured_content["case_id"]
    # The case lives in the store on disk: a fresh in-process server on the same directory sees it.
    again = create_server(ServerConfig(workspace / "state", workspace / "repo", (workspace,)))
    assert again.state.store.get_case(case_id).python == sys.executable


def test_cli_check_env_prints_the_report(workspace):
    out = subprocess.run(
        [sys.executable, "-m", "pt2_bug_basher", "check-env", "--python", sys.executable,
         "--state-dir", str(workspace / "state"), "--repo", str(workspace / "repo"), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and report["case_id"]
    listed = subprocess.run(
        [sys.executable, "-m", "pt2_bug_basher", "cases", "--state-dir", str(workspace / "state")],
        capture_output=True, text=True, timeout=120,
    )
    assert listed.returncode == 0 and report["case_id"] in listed.stdout
    assert "1/13 steps" in listed.stdout and "run_with_logs" in listed.stdout


def test_install_skill_copies_the_skill(tmp_path):
    dest = tmp_path / "skills" / "pt2-bug-basher"
    out = subprocess.run(
        [sys.executable, "-m", "pt2_bug_basher", "install-skill", "--dest", str(dest)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    text = (dest / "SKILL.md").read_text()
    assert text.startswith("---\nname: pt2-bug-basher\n")


def test_wheel_carries_skill_and_prompts(tmp_path):
    root = Path(__file__).resolve().parents[1]
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
         str(root)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("pt2_bug_basher-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "pt2_bug_basher/_data/skill/SKILL.md" in names
    assert any(n.startswith("pt2_bug_basher/_data/prompts/categories/") for n in names)
    assert "pt2_bug_basher/_probes/env_probe.py" in names
    assert "pt2_bug_basher/_probes/pytest_plugin/pt2bb_pytest_report.py" in names
    # Installed from the wheel alone (no checkout on the path), the skill is still found.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import pt2_bug_basher.content as c; print(c.__file__); print(c.skill_dir()); print(len(c.celebrations()));"
        "import pt2_bug_basher.analysis.learned as m; print(m.corpus_dir()); print(len(m.load_corpus()))"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(target)], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    module_file, skill_dir, count, corpus_dir, samples = out.stdout.split()
    assert module_file.startswith(str(target)) and skill_dir.startswith(str(target))
    assert int(count) >= 20
    # the learned guess is fitted on the wheel's copy of the labelled corpus, all of it
    from pt2_bug_basher.analysis.learned import CORPUS_FILES, load_corpus
    assert corpus_dir.startswith(str(target))
    assert all(f"pt2_bug_basher/_data/corpus/{name}" in names for name in CORPUS_FILES)
    assert int(samples) == len(load_corpus(root / "tests" / "data" / "corpus")) > 400


def test_a_later_failure_on_the_same_code_revokes_a_pass(config):
    from pt2_bug_basher.case.store import Store
    from pt2_bug_basher.case.workflow import Workflow

    store = Store(config.state_dir)
    case = store.create_case(str(config.default_repo), sys.executable, {})
    tree = {"hash": "tree-1"}
    flow = lambda: Workflow(store, case.case_id, lambda: tree["hash"])  # noqa: E731
    store.add_evidence(case.case_id, "verify", True, "all passed", tree_hash="tree-1")
    assert {s.step: s.status for s in flow().status().steps}[Step.verify] == "done"
    store.add_evidence(case.case_id, "verify", False, "the test failed this time", tree_hash="tree-1")
    status = flow().status()
    assert {s.step: s.status for s in status.steps}[Step.verify] == "failed"
    # A failure on other code says nothing about this code: an earlier pass on this tree stands.
    store.add_evidence(case.case_id, "verify", True, "passed again", tree_hash="tree-1")
    store.add_evidence(case.case_id, "verify", False, "failed elsewhere", tree_hash="tree-0")
    assert {s.step: s.status for s in flow().status().steps}[Step.verify] == "done"
    tree["hash"] = "tree-2"
    assert {s.step: s.status for s in flow().status().steps}[Step.verify] == "stale"


async def test_a_named_env_is_found_through_conda_info(server, this_venv, monkeypatch, tmp_path, torch_version):
    """A real conda executable is not available here: a stand-in answers `conda info --envs --json`."""
    env_dir = tmp_path / "envs" / "pt2named"
    env_dir.parent.mkdir()
    env_dir.symlink_to(this_venv)
    conda = tmp_path / "conda"
    conda.write_text(f"#!/bin/sh\necho '{json.dumps({'envs': [str(tmp_path / 'base'), str(env_dir)]})}'\n")
    conda.chmod(0o755)
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CONDA_EXE", str(conda))
    async with Client(server) as client:
        data = (await client.call_tool("check_env", {"conda_env": "pt2named"})).structured_content
        missing = await client.call_tool("check_env", {"conda_env": "other"})
    assert data["ok"] and data["python"] == str(env_dir / "bin" / "python")
    assert "conda info --envs" in data["rule"] and data["torch"]["version"] == torch_version
    assert data["ask_user"] and "pt2named" in data["ask_user"]
    assert missing.is_error and "pt2named" in missing.content[0].text


def test_short_sync_commands_are_killed_with_their_group_on_timeout(tmp_path):
    from conftest import process_running

    from pt2_bug_basher.execution.runner import run_short_sync

    pid_file = tmp_path / "pid"
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(300)\n")
    assert run_short_sync([sys.executable, "-c", code], dict(os.environ), timeout_s=3) is None
    assert not process_running(int(pid_file.read_text()))
    assert run_short_sync([sys.executable, "-c", "print('hi')"], dict(os.environ), timeout_s=30) == "hi\n"


def test_wait_gone_waits_for_a_killed_process_and_counts_zombies_as_gone():
    import signal

    from pt2_bug_basher.execution.runner import wait_gone

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        assert wait_gone([sleeper.pid], timeout_s=0.3) == [sleeper.pid]  # alive: reported, not waited forever
        os.kill(sleeper.pid, signal.SIGKILL)
        assert wait_gone([sleeper.pid], timeout_s=10) == []  # a zombie nobody reaped yet is gone
        assert sleeper.poll() == -signal.SIGKILL  # ...and was a zombie until this reap
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_next_open_step_is_the_one_the_next_step_sentence_leads_to(config):
    from pt2_bug_basher.case.store import Store
    from pt2_bug_basher.case.workflow import Workflow

    store = Store(config.state_dir)
    case = store.create_case(str(config.default_repo), sys.executable, {})
    flow = lambda: Workflow(store, case.case_id, lambda: "tree-1")  # noqa: E731
    first = flow().status()
    assert first.next_open == Step.environment and first.next_step.startswith("Step 1 ")
    store.add_evidence(case.case_id, Step.environment.value, True, "seen", tree_hash="tree-1")
    assert flow().status().next_open == Step.reproduce
    for step in (Step.reproduce, Step.reduce, Step.test, Step.main_check):
        store.add_evidence(case.case_id, step.value, True, "seen", tree_hash="tree-1")
    store.add_waiver(case.case_id, Step.logs.value, "not needed here")
    later = flow().status()
    assert later.next_open == Step.classify and later.next_step.startswith("Step 7 ")
    assert {s.step: s.status for s in later.steps}[Step.logs] == "waived"
