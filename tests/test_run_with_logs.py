"""run_with_logs and classify_error through a real MCP client, on real failing scripts."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import anyio
import pytest
from conftest import EXAMPLES
from mcp import Client

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.mcp_server.server import create_server
from pt2_bug_basher.steps.environment import start_case

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def module_config(tmp_path_factory) -> ServerConfig:
    root = tmp_path_factory.mktemp("rwl")
    repo = root / "repo"
    shutil.copytree(EXAMPLES, repo / "examples")
    return ServerConfig(state_dir=root / "state", default_repo=repo, allowed_roots=(root,))


@pytest.fixture(scope="module")
def case_id(module_config: ServerConfig) -> str:
    result = anyio.run(lambda: start_case(Store(module_config.state_dir), module_config.default_repo,
                                          python=sys.executable))
    assert result.ok
    return result.case_id


@pytest.fixture
def example(module_config: ServerConfig):
    return lambda name: str(module_config.default_repo / "examples" / name)


CATEGORY_CASES = [
    ("graph_break_fullgraph.py", "graph_break", None),
    ("backend_compiler_failed.py", "backend_compiler_failed", None),
    ("runtime_error.py", "runtime_crash", None),
    ("accuracy_mismatch.py", "accuracy", None),
    ("recompile_limit.py", "recompile", None),
    ("export_failure.py", "export", None),
    ("segfault.py", "runtime_crash", "SIGSEGV"),
    ("graph_break_logs_only.py", "graph_break", "logs"),
]


@pytest.mark.parametrize("script,category,extra", CATEGORY_CASES, ids=[c[0] for c in CATEGORY_CASES])
async def test_each_category_reproduces_with_a_stable_signature(module_config, case_id, example, script,
                                                               category, extra):
    server = create_server(module_config)
    args = {"case_id": case_id, "script": example(script), "repeat": 2}
    if extra == "logs":
        args["logs"] = "graph_break"
    async with Client(server) as client:
        result = await client.call_tool("run_with_logs", args)
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert len(data["runs"]) == 2 and all(r["failed"] for r in data["runs"]), data["runs"]
    assert data["reproduced"] and data["same_signature"]
    assert data["failure"]["category"] == category, data["failure"]
    assert data["runs"][0]["signature"] == data["runs"][1]["signature"]
    assert data["failure"]["signature"] == data["runs"][0]["signature"]
    assert "reproduce" in data["recorded"]
    assert "localize(" in data["next_step"] and case_id in data["next_step"]  # step 3 starts with the ladder
    if extra == "SIGSEGV":
        assert data["runs"][0]["signal"] == "SIGSEGV" and data["runs"][0]["exit"] == "killed by SIGSEGV"
    if extra == "logs":
        assert data["env_added"]["TORCH_LOGS"] == "graph_breaks"
        assert len(data["graph_breaks"]) >= 2
    if script == "graph_break_fullgraph.py":  # the site in Dynamo that raised the graph break comes first
        top = data["suspects"][0]
        assert top["evidence"] == ["graph_break"] and "raise_jump_graph_break" in top["function"], data["suspects"]
        assert '"Data-dependent branching"' in top["why"] and top["file"] == "torch/_dynamo/symbolic_convert.py"
    # The result stays compact whatever the logs held.
    assert len(result.content[0].text) < 12_000
    # Full logs are resources.
    async with Client(server) as client:
        stderr = await client.read_resource(data["runs"][0]["stderr"])
    assert stderr.contents[0].text.strip() or extra in ("logs",)


async def test_a_script_that_does_not_fail_is_not_a_reproduction(module_config, case_id, example):
    # one run: no reproduction, so no reruns with logs; the hint names the logs that would show graph breaks
    async with Client(create_server(module_config)) as client:
        result = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 1,
                                                          "script": example("graph_break_logs_only.py")})
    data = result.structured_content
    assert not data["reproduced"] and not any(r["failed"] for r in data["runs"])
    assert "did not fail" in data["next_step"] and 'logs="graph_break"' in data["next_step"]
    assert data["runs"][0]["exit"] == "exit code 0"
    assert data["compile_off"] is None and data["logged_runs"] == []

    # a reproduction of a script that really passes: the compile-off run and the logged reruns show nothing
    passes = module_config.default_repo / "examples" / "passes.py"
    shutil.copy(Path(__file__).parent / "scripts" / "verdict" / "passes.py", passes)
    async with Client(create_server(module_config)) as client:
        result = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(passes)})
    data = result.structured_content
    assert not data["reproduced"] and not any(r["failed"] for r in data["runs"] + data["logged_runs"])
    assert len(data["logged_runs"]) == 2 and data["compile_off"]["exit_code"] == 0
    assert "did not fail" in data["next_step"] and "graph_breaks,recompiles" in data["next_step"]
    assert data["verdict"]["category"] is None and data["verdict"]["compiler_at_fault"] is None


async def test_unknown_torch_logs_name_is_rejected_before_running(module_config, case_id, example):
    server = create_server(module_config)
    before = len(server.state.store.runs(case_id))
    async with Client(server) as client:
        result = await client.call_tool("run_with_logs", {"case_id": case_id, "logs": "graph_break,recompile_s",
                                                          "script": example("graph_break_fullgraph.py")})
    assert result.is_error
    text = result.content[0].text
    assert "recompile_s" in text and "recompiles" in text
    assert len(server.state.store.runs(case_id)) == before


async def test_bad_arguments_are_tool_errors(module_config, case_id, example):
    async with Client(create_server(module_config)) as client:
        outside = await client.call_tool("run_with_logs", {"case_id": case_id, "script": "/etc/passwd"})
        missing = await client.call_tool("run_with_logs", {"case_id": case_id, "script": example("nope.py")})
        repeat = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 99,
                                                          "script": example("segfault.py")})
        env = await client.call_tool("run_with_logs", {"case_id": case_id, "env": {"BAD NAME": "1"},
                                                       "script": example("segfault.py")})
        timeout = await client.call_tool("run_with_logs", {"case_id": case_id, "timeout_s": -1,
                                                           "script": example("segfault.py")})
        unknown = await client.call_tool("run_with_logs", {"case_id": "case-x", "script": example("segfault.py")})
    # outside the repository only a Python script runs, from a copy the case keeps
    assert outside.is_error and "not a Python script (.py)" in outside.content[0].text
    assert missing.is_error and "does not exist" in missing.content[0].text
    assert repeat.is_error and "repeat" in repeat.content[0].text
    assert env.is_error and "BAD NAME" in env.content[0].text
    assert timeout.is_error and "timeout_s" in timeout.content[0].text
    assert unknown.is_error and "check_env" in unknown.content[0].text


async def test_timeout_is_reported_and_nothing_is_left_running(module_config, case_id):
    repo = module_config.default_repo
    script = repo / "hang.py"
    script.write_text("import subprocess, sys, time\n"
                      "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                      "time.sleep(600)\n")
    server = create_server(module_config)
    async with Client(server) as client:
        result = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(script),
                                                          "repeat": 1, "timeout_s": 3})
    data = result.structured_content
    assert data["runs"][0]["timed_out"] and "timeout" in data["runs"][0]["exit"]
    assert "timeout" in data["next_step"]
    run = server.state.store.get_run(data["runs"][0]["run_id"])
    assert run.status == "timeout"
    assert live_group_members(run.pid) == []


def live_group_members(pgid: int) -> list[int]:
    """Processes of a process group that are still running (zombies awaiting a reaper excluded)."""
    import os

    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


async def test_classify_error_on_text_and_on_a_run(module_config, case_id, example):
    text = (
        "W1202 warning: something noisy\n" * 50
        + "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n    f()\n"
        + "torch._dynamo.exc.Unsupported: Attempted to call function marked as skipped\n"
        + "\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you're reporting "
          "a bug to PyTorch). For even more developer context, set TORCH_LOGS=\"+dynamo\"\n"
    )
    async with Client(create_server(module_config)) as client:
        plain = (await client.call_tool("classify_error", {"text": text})).structured_content
        assert plain["category"] == "graph_break"
        assert any(e["line_no"] == 54 and "Unsupported" in e["text"] for e in plain["evidence"])
        assert plain["recorded"] is False and "run_with_logs" in plain["diagnostic"]
        assert plain["guide"]["log_preset"]
        run = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 1,
                                                       "script": example("backend_compiler_failed.py")})
        run_id = run.structured_content["runs"][0]["run_id"]
        recorded = (await client.call_tool("classify_error", {"run_id": run_id, "case_id": case_id})).structured_content
        both = await client.call_tool("classify_error", {"text": "x", "run_id": run_id})
        status = (await client.call_tool("get_workflow", {"case_id": case_id})).structured_content["case"]
    assert recorded["category"] == "backend_compiler_failed" and recorded["recorded"]
    assert both.is_error
    assert {s["step"]: s["status"] for s in status["steps"]}["classify"] == "done"


async def test_trace_runs_tlparse_and_reads_its_compile_index(module_config, case_id, example):
    async with Client(create_server(module_config)) as client:
        result = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 1, "trace": True,
                                                          "script": example("graph_break_fullgraph.py")})
    trace = result.structured_content["trace"]
    assert trace["error"] is None, trace
    assert Path(trace["report"]).name == "index.html" and Path(trace["report"]).exists()
    assert Path(trace["trace_log"]).name.endswith(".log")
    assert trace["failed_compiles"] >= 1
    assert any(c["status"] == "failed" and c["compile_id"] == "[0/0]" for c in trace["compiles"])
    assert result.structured_content["env_added"]["TORCH_TRACE"]


async def test_runtime_crash_preset_applies_its_environment_and_inductor_config(module_config, case_id, example):
    async with Client(create_server(module_config)) as client:
        result = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 1, "logs": "runtime_crash",
                                                          "env": {"TORCHINDUCTOR_NAN_ASSERTS": "0"},
                                                          "script": example("segfault.py")})
    data = result.structured_content
    assert data["env_added"]["CUDA_LAUNCH_BLOCKING"] == "1"
    assert data["env_added"]["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
    assert data["env_added"]["TORCHINDUCTOR_NAN_ASSERTS"] == "0"  # the caller's value wins
    assert data["inductor_config"] == {"triton.debug_sync_kernel": True}
    assert "with_config.py" in data["command"][1]
    # The script still ran as itself: same crash, same signature as a plain run.
    assert data["runs"][0]["signal"] == "SIGSEGV" and data["failure"]["category"] == "runtime_crash"
    async with Client(create_server(module_config)) as client:
        stderr = (await client.read_resource(data["runs"][0]["stderr"])).contents[0].text
    assert "PT2BB-CONFIG: torch._inductor.config.triton.debug_sync_kernel = True" in stderr


async def test_output_code_logs_give_the_generated_kernels_in_a_field_of_their_own(module_config, case_id, example):
    async with Client(create_server(module_config)) as client:
        result = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 1, "logs": "accuracy",
                                                          "script": example("accuracy_mismatch.py")})
        data = result.structured_content
        stderr = (await client.read_resource(data["runs"][0]["stderr"])).contents[0].text
    assert "output_code" in data["env_added"]["TORCH_LOGS"].split(",")
    assert data["failure"]["category"] == "accuracy"
    # The kernels the log defines, read from the log without the server's help.
    defined = re.findall(r"\[__output_code\] (cpp_fused_\w+) = async_compile\.cpp_pybinding\(", stderr)
    assert defined and [k["name"] for k in data["kernels"]] == defined and data["kernels_left_out"] == []
    kernel = data["kernels"][0]
    assert kernel["kind"] == "cpp" and kernel["compile_id"] == "[0/0]"
    # The line that gives the bug away: relu(x) computed as x + 1.
    assert "auto tmp1 = tmp0 + decltype(tmp0)(1);" in kernel["code"]
    logged = {line.split("[__output_code] ", 1)[1].strip() for line in stderr.splitlines()
              if "[__output_code] " in line}
    assert all(line.strip() in logged for line in kernel["code"].splitlines())
    # as generated: braces and indentation kept, so the loop nest reads as it runs
    assert any(line.strip() == "}" for line in kernel["code"].splitlines())
    assert any(line.startswith(" ") for line in kernel["code"].splitlines())
    assert "#include" not in kernel["code"] and sum(len(k["code"]) for k in data["kernels"]) <= 6000
    # The tail ends on the error, not on the wrapper's boilerplate the log printed before it.
    assert not any("compiled_module_main" in line or "[__output_code]" in line for line in data["tail"])
    assert any("Tensor-likes are not close" in line for line in data["tail"])
