"""The command line's parity with the tools: `call` runs any tool through the real server code, and
`triage --json` says where it left the case and which calls go on from there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from conftest import EXAMPLES, REPO_ROOT

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.case.workflow import Workflow
from pt2_bug_basher.cli.main import main
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.mcp_server.calls import check_text, find_calls, input_schemas, parse_call
from pt2_bug_basher.mcp_server.server import create_server


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m pt2_bug_basher ...` with this checkout's package first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "server"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pt2_bug_basher", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=env)


@pytest.fixture(scope="module")
def schemas(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-schemas")
    return anyio.run(input_schemas, create_server(ServerConfig(root / "state", root, (root,))))


def test_call_in_process(workspace, capsys):
    base = ["--state-dir", str(workspace / "state"), "--repo", str(workspace / "repo")]
    assert main(["call", "check_env", json.dumps({"python": sys.executable}), *base]) == 0
    opened = json.loads(capsys.readouterr().out)
    assert opened["ok"] is True and opened["case_id"]
    case_id = opened["case_id"]

    assert main(["call", "get_workflow", json.dumps({"case_id": case_id}), *base]) == 0
    status = json.loads(capsys.readouterr().out)["case"]
    assert status["case_id"] == case_id and status["steps"][0]["status"] == "done"

    # a gate refuses: exit 1, the tool error's message (with the call that unblocks it) on stderr
    assert main(["call", "localize", json.dumps({"case_id": case_id}), *base]) == 1
    refused = capsys.readouterr()
    assert refused.out == ""
    assert "localize refused" in refused.err and f'run_with_logs(case_id="{case_id}"' in refused.err

    assert main(["call", "localise", "{}", *base]) == 2
    assert "no tool 'localise' (did you mean localize?)" in capsys.readouterr().err
    assert main(["call", "get_workflow", "{not json", *base]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["call", "get_workflow", '["a list"]', *base]) == 2
    assert "must be a JSON object" in capsys.readouterr().err


def test_tools_lists_the_servers_tools_with_their_descriptions(workspace, capsys):
    """Seen by an agent: the only way to see the tools from a shell was the error of an unknown tool."""
    base = ["--state-dir", str(workspace / "state"), "--repo", str(workspace / "repo")]
    server = create_server(ServerConfig(workspace / "state", workspace / "repo", (workspace,)))
    offered = {tool.name: tool for tool in anyio.run(server.list_tools)}
    assert main(["tools", *base]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = dict(line.split(None, 1) for line in lines)
    assert list(shown) == list(offered) and len(shown) == len(ToolName)
    assert shown["waive_step"] == "Waive one step's gate explicitly, with a reason."
    assert shown["register_test"] == "Step 4. Check the unit test you wrote, then run it."
    assert all(len(summary) <= 160 for summary in shown.values())

    assert main(["tools", "--json", *base]) == 0
    listed = json.loads(capsys.readouterr().out)["tools"]
    assert [tool["name"] for tool in listed] == list(offered)
    for tool in listed:  # the whole tools/list entry: description and schemas as an agent gets them
        assert tool["description"] == offered[tool["name"]].description
        assert tool["inputSchema"] == offered[tool["name"]].input_schema and "outputSchema" in tool


def test_read_prints_a_resource_a_result_names(workspace, capsys):
    """Seen by an agent: results name case://... resources, which a shell could not read."""
    base = ["--state-dir", str(workspace / "state"), "--repo", str(workspace / "repo")]
    assert main(["call", "check_env", json.dumps({"python": sys.executable}), *base]) == 0
    case_id = json.loads(capsys.readouterr().out)["case_id"]
    assert main(["read", f"case://{case_id}/status", *base]) == 0
    assert json.loads(capsys.readouterr().out)["case_id"] == case_id
    assert main(["read", "skill://pt2-bug-basher/SKILL.md", *base]) == 0
    assert capsys.readouterr().out.startswith("---\nname: pt2-bug-basher")
    assert main(["read", "case://case-nope/status", *base]) == 1
    refused = capsys.readouterr()
    assert refused.out == "" and "unknown case_id 'case-nope'" in refused.err and "Traceback" not in refused.err
    assert main(["read", "status", *base]) == 2
    assert "not a resource URI" in capsys.readouterr().err


def test_call_through_a_subprocess(workspace):
    base = ["--state-dir", str(workspace / "state"), "--repo", str(workspace / "repo")]
    listed = cli("call", "get_workflow", *base)  # the arguments default to {}
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["skill"].startswith("# pt2-bug-basher")

    unknown_case = cli("call", "review_changes", '{"case_id": "case-nope"}', *base)
    assert unknown_case.returncode == 1 and unknown_case.stdout == ""
    assert "unknown case_id 'case-nope'" in unknown_case.stderr
    assert unknown_case.stderr.count("unknown case_id") == 1  # said once, not echoed by the SDK's log

    bad_arguments = cli("call", "waive_step", '{"case_id": "case-nope", "step": 3}', *base)
    assert bad_arguments.returncode == 1 and "reason" in bad_arguments.stderr

    for args, needle in (
        (("call", "get_workflows", "{}"), "no tool 'get_workflows'"),
        (("call", "get_workflow", "{'case_id': 1}"), "not valid JSON"),
    ):
        out = cli(*args, *base)
        assert out.returncode == 2 and needle in out.stderr and out.stdout == "", out


def test_triage_json_says_where_it_left_the_case(tmp_path, schemas):
    state = tmp_path / "state"
    script = EXAMPLES / "graph_break_fullgraph.py"  # backend="eager": no Inductor compile
    done = cli("triage", str(script), "--python", sys.executable, "--timeout", "300", "--state-dir", str(state),
               "--repo", str(tmp_path), "--json", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    # what it printed before, plus the new top-level summary
    assert {"env", "reproduction", "with_logs"} <= set(report)
    assert report["category"] == "graph_break" and report["category"] == report["reproduction"]["failure"]["category"]
    assert 0.5 < report["confidence"] <= 1 and report["reproduced"] is True
    steps = report["next_steps"]
    assert steps
    case_id = report["env"]["case_id"]
    for step in steps:
        assert [parse_call(c).tool for c in find_calls(step, schemas)] and check_text(step, schemas) == [], step
        call = parse_call(step)  # each item is exactly one call
        assert call.arguments["case_id"] == case_id
        # never a step triage already did: the environment, the reproduction, the graph_break preset's logs
        assert call.tool not in ("check_env", "run_with_logs"), step
    # the first one works from where triage left the case: its gate is open
    first = parse_call(steps[0])
    # step 3 starts with the ladder, on the case's own copy of the script (it lies outside the repository)
    copy = Path(first.arguments["script"])
    assert first.tool == "localize" and copy.is_relative_to(state / "cases" / case_id)
    assert copy.read_text() == script.read_text() and report["reproduction"]["script"] == str(copy)
    Workflow(Store(state), case_id, lambda: "tree").require(ToolName(first.tool))
    assert parse_call(steps[-1]).tool == "register_test"


def test_triage_human_report_lists_the_same_next_steps(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    script = repo / "repro.py"
    script.write_text(Path(EXAMPLES / "graph_break_fullgraph.py").read_text())
    done = cli("triage", str(script), "--python", sys.executable, "--timeout", "300",
               "--state-dir", str(tmp_path / "state"), "--repo", str(repo), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "== Next steps" in out and "  1. localize(case_id=" in out and "  2. minify(case_id=" in out
    # the repository has no topical test file: the upstream one is named as absent, never as a file to edit
    assert "write a failing test in one of" not in out and "register_test(case_id=" in out
    assert "upstream PyTorch keeps them in test/dynamo/test_repros.py, not present in this repository" in out
    assert "pt2-bug-basher call TOOL" in out


def test_cli_modules_do_not_import_each_other_in_a_cycle():
    import ast

    cli_dir = REPO_ROOT / "server" / "pt2_bug_basher" / "cli"
    imports = {}
    for path in cli_dir.glob("*.py"):
        tree = ast.parse(path.read_text())
        imports[path.stem] = {node.module.rsplit(".", 1)[-1] for node in ast.walk(tree)
                              if isinstance(node, ast.ImportFrom) and node.module
                              and node.module.startswith("pt2_bug_basher.cli.")}
    assert "main" not in set().union(*imports.values()), imports
    assert "triage" not in imports["render"] or "render" not in imports["triage"]
