"""The verdict from what the program does: a compile-off run, reruns with logs of scripts that exit 0,
signatures that ignore run-to-run numbers. Real scripts, through the MCP client and through `triage --json`."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import anyio
import pytest
from conftest import EXAMPLES, REPO_ROOT
from mcp import Client
from test_cli import cli

from pt2_bug_basher.analysis.failure import parse_failure
from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.case.workflow import Workflow
from pt2_bug_basher.domain.errors import GateClosed
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.mcp_server.calls import check_text, find_calls, input_schemas, parse_call
from pt2_bug_basher.mcp_server.server import create_server
from pt2_bug_basher.steps.environment import start_case

SCRIPTS = REPO_ROOT / "tests" / "scripts" / "verdict"

# script, category, reproduced, compiler at fault
CASES = [
    pytest.param(SCRIPTS / "bare_assert_mismatch.py", "accuracy", True, True, id="bare_assert_mismatch"),
    pytest.param(SCRIPTS / "user_error_matmul.py", "user_error", True, False, id="user_error"),
    pytest.param(SCRIPTS / "recompile_warning.py", "recompile", True, None, id="recompile_warning_exit_0"),
    pytest.param(EXAMPLES / "graph_break_logs_only.py", "graph_break", True, None, id="graph_break_logs_only"),
    pytest.param(SCRIPTS / "mark_dynamic_violation.py", "dynamic_shapes", True, True, id="mark_dynamic"),
    pytest.param(SCRIPTS / "varying_numbers.py", "accuracy", True, True, id="varying_numbers"),
]


# --------------------------------------------------------------------------------------------
# Signatures: numbers do not split one failure, words, types and frames still split two


def _traceback(exc: str, message: str, line: int = 7) -> str:
    return ('Traceback (most recent call last):\n'
            f'  File "/home/u/repro.py", line {line}, in <module>\n    check(x)\n'
            f'  File "/home/u/repro.py", line 3, in check\n    raise {exc}(msg)\n'
            f'{exc}: {message}\n')


def test_numbers_in_the_message_do_not_change_the_signature():
    texts = [_traceback("ValueError", "got 17 of tensor([0.1, 0.2]) at size (3x4), max diff 1.8091912269592285"),
             _traceback("ValueError", "got 4 of tensor([5.5,\n 1.0]) at size (8x2), max diff 0.25"),
             _traceback("ValueError", "got 123456 of tensor([]) at size (1x1), max diff 3e-05")]
    signatures = {parse_failure(text, 1).signature for text in texts}
    assert len(signatures) == 1, signatures


def test_two_different_failures_in_one_script_keep_different_signatures():
    base = parse_failure(_traceback("ValueError", "got 17 items, expected 3"), 1)
    other_words = parse_failure(_traceback("ValueError", "lost 17 items, expected 3"), 1)
    other_type = parse_failure(_traceback("IndexError", "got 17 items, expected 3"), 1)
    other_frame = parse_failure(_traceback("ValueError", "got 17 items, expected 3").replace("in check", "in load"), 1)
    signatures = [r.signature for r in (base, other_words, other_type, other_frame)]
    assert len(set(signatures)) == 4, signatures


# --------------------------------------------------------------------------------------------
# Through the MCP client


@pytest.fixture(scope="module")
def module_config(tmp_path_factory) -> ServerConfig:
    root = tmp_path_factory.mktemp("verdict")
    (root / "repo").mkdir()
    return ServerConfig(state_dir=root / "state", default_repo=root / "repo", allowed_roots=(root, REPO_ROOT))


@pytest.fixture(scope="module")
def schemas(module_config):
    return anyio.run(input_schemas, create_server(module_config))


def _new_case(config: ServerConfig) -> str:
    opened = anyio.run(lambda: start_case(Store(config.state_dir), config.default_repo, python=sys.executable))
    assert opened.ok
    return opened.case_id


def _reproduced(config: ServerConfig, script: Path) -> tuple[str, dict]:
    """A new case, and run_with_logs(repeat=2) of the script in it through a real MCP client."""
    case_id = _new_case(config)
    server = create_server(config)

    async def go():
        async with Client(server) as client:
            result = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(script), "repeat": 2})
            assert not result.is_error, result.content[0].text
            return result.structured_content

    return case_id, anyio.run(go)


def _assert_calls_accepted(text: str, schemas) -> list:
    calls = find_calls(text, schemas)
    assert calls and check_text(text, schemas) == [], text
    return [parse_call(c) for c in calls]


@pytest.mark.parametrize("script,category,reproduced,at_fault", CASES)
def test_run_with_logs_verdict(module_config, schemas, script: Path, category, reproduced, at_fault):
    case_id, data = _reproduced(module_config, script)
    verdict = data["verdict"]
    assert verdict["category"] == category and data["failure"]["category"] == category, verdict
    assert data["reproduced"] is reproduced and verdict["reproduced"] is reproduced
    assert verdict["compiler_at_fault"] is at_fault
    assert verdict["evidence"] and data["compile_off"]["run_id"] in " ".join(verdict["evidence"])
    # the compile-off run is recorded like any other run
    off = Store(module_config.state_dir).get_run(data["compile_off"]["run_id"])
    assert off.tool == "run_with_logs" and off.env.get("TORCHDYNAMO_DISABLE") == "1"
    calls = _assert_calls_accepted(data["next_step"], schemas)
    flow = Workflow(Store(module_config.state_dir), case_id, lambda: "tree")
    if category == "user_error":
        assert "not a compiler bug" in data["next_step"]
        assert flow.status().stopped and "TORCHDYNAMO_DISABLE=1" in flow.status().stopped
        for tool in (ToolName.localize, ToolName.minify, ToolName.register_test):
            with pytest.raises(GateClosed, match="not a compiler bug"):
                flow.require(tool)
        assert [c.tool for c in calls] == ["run_with_logs", "waive_step"]
        Store(module_config.state_dir).add_waiver(case_id, "reproduce", "the compiler is at fault here after all")
        lifted = Workflow(Store(module_config.state_dir), case_id, lambda: "tree")
        assert lifted.stopped() is None
        lifted.require(ToolName.minify)
    else:
        assert "reproduce" in data["recorded"]
        flow.require(ToolName(calls[0].tool))  # the next call's gate is open
    if category in ("graph_break", "recompile"):
        assert all(r["exit_code"] == 0 for r in data["runs"])  # exit 0 ...
        assert len(data["logged_runs"]) == 2 and all(r["failed"] for r in data["logged_runs"])  # ... but logs show it
        # compilation off can never recompile or break a graph: its passing decides nothing about fault
        assert any("passes, as it must" in line and "not decided" in line for line in verdict["evidence"]), verdict
    if category == "recompile":
        assert any("recompile limit hit (factor ==" in line for line in verdict["evidence"]), verdict["evidence"]


def test_a_run_that_passes_after_the_reproduction_says_so(module_config, schemas):
    """After a reproduction, a passing run of the same script is most likely the fix holding: the next step says
    so and goes on with the case, instead of asking whether the script runs the failing configuration."""
    script = SCRIPTS / "bare_assert_mismatch.py"
    case_id, data = _reproduced(module_config, script)
    assert data["reproduced"] and data["same_signature"]

    async def go():
        async with Client(create_server(module_config)) as client:
            result = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(script), "repeat": 1,
                                                              "env": {"PT2BB_FIXED": "1"}})
            assert not result.is_error, result.content[0].text
            return result.structured_content

    data = anyio.run(go)
    assert not any(r["failed"] for r in data["runs"]) and data["same_signature"] is False
    assert data["next_step"].startswith("The script passes now") and "did not fail" not in data["next_step"]
    _assert_calls_accepted(data["next_step"], schemas)
    # the "fix" was an environment variable: the repository is as it was when the failure reproduced
    assert "Nothing in the repository changed since the reproduction" in data["next_step"], data["next_step"]
    # a change to the repository (what a fix is) is said to be one
    (module_config.default_repo / "fixed_here.py").write_text("FIXED = True\n")
    assert "The repository changed since the reproduction" in anyio.run(go)["next_step"]
    # another script that passes was never reproduced: no such claim for it
    other = module_config.default_repo / "passes.py"
    shutil.copy(SCRIPTS / "passes.py", other)

    async def other_run():
        async with Client(create_server(module_config)) as client:
            result = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(other), "repeat": 1})
            return result.structured_content

    assert "did not fail" in anyio.run(other_run)["next_step"]


# --------------------------------------------------------------------------------------------
# Through `triage --json`


@pytest.mark.parametrize("script,category,reproduced,at_fault", CASES)
def test_triage_json_verdict(tmp_path, schemas, script: Path, category, reproduced, at_fault):
    repo = tmp_path / "repo"
    repo.mkdir()
    local = repo / script.name
    shutil.copy(script, local)
    state = tmp_path / "state"
    done = cli("triage", str(local), "--python", sys.executable, "--timeout", "300", "--state-dir", str(state),
               "--repo", str(repo), "--json", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["category"] == category, (report["category"], report["evidence"])
    assert report["reproduced"] is reproduced and report["compiler_at_fault"] is at_fault
    assert report["evidence"] and 0.5 < report["confidence"] <= 1
    case_id = report["env"]["case_id"]
    assert report["next_steps"]
    flow = Workflow(Store(state), case_id, lambda: "tree")
    for step in report["next_steps"]:
        (call,) = _assert_calls_accepted(step, schemas)
        assert call.arguments["case_id"] == case_id
        assert call.tool not in ("check_env", "run_with_logs"), step  # never a step triage already did
    first = parse_call(report["next_steps"][0])
    if category == "user_error":
        assert first.tool == "waive_step" and report["advice"] and "not a compiler bug" in report["advice"]
        assert report["with_logs"] is None
    else:
        flow.require(ToolName(first.tool))
    assert report["reproduction"]["next_step"]
    if category == "recompile":  # the preset's verbose recompiles and guards were not in the reproduction's reruns
        assert report["with_logs"]["env_added"]["TORCH_LOGS"] == "recompiles,recompiles_verbose,guards"
    if category == "graph_break":  # the reproduction's reruns logged graph_breaks already
        assert report["with_logs"] is None


@pytest.mark.parametrize("printed,failed", [("eager: nan compiled: nan", False), ("eager: 1.0 compiled: 2.0", True)])
def test_a_passing_run_fails_on_a_printed_mismatch_never_on_a_guess(tmp_path: Path, printed: str, failed: bool):
    """A compile-off run of a real-world repro printed `eager: nan compiled: nan` and exited 0: the fallback's
    word evidence ("nan") would guess accuracy, which must not make the run a failure (and the case a user
    error)."""
    from pt2_bug_basher.analysis.classify import classify, guessed
    from pt2_bug_basher.analysis.verdict import RunVerdict
    from pt2_bug_basher.execution.runner import ProcessOutcome
    from pt2_bug_basher.execution.runs import RunResult

    stdout, stderr = tmp_path / "stdout.log", tmp_path / "stderr.log"
    stdout.write_text(printed + "\n")
    stderr.write_text("")
    outcome = ProcessOutcome(argv=["python", "repro.py"], exit_code=0, signal_name=None, timed_out=False,
                             cancelled=False, duration_s=1.0, pid=1, stdout_path=stdout, stderr_path=stderr,
                             stdout_bytes=len(printed) + 1, stderr_bytes=0)
    verdict = RunVerdict(RunResult("run-x", outcome, {}, stdout, stderr))
    assert verdict.failed is failed
    if not failed:  # a passing run's output is not guessed at; the same words from a failing run may be
        assert classify(printed + "\n", exit_code=0).category == "unknown"
        text = classify(printed + "\n", exit_code=1)
        assert text.category == "accuracy" and guessed(text), text


def test_a_failure_raised_in_the_scripts_own_backend_is_not_pytorchs(module_config, schemas):
    script = SCRIPTS / "own_backend_raises.py"
    case_id, data = _reproduced(module_config, script)
    verdict = data["verdict"]
    assert data["reproduced"] and data["failure"]["own_backend"].startswith(f"strict_backend ({script}:")
    # the compile-off run passes (the backend never runs), yet the compiler is not at fault: the backend is
    assert not data["compile_off"]["failed"]
    assert verdict["category"] == "user_error" and verdict["compiler_at_fault"] is False, verdict
    assert "own backend strict_backend" in verdict["advice"]
    assert "own backend strict_backend" in data["next_step"] and 'backend="aot_eager"' in data["next_step"]
    assert [c.tool for c in _assert_calls_accepted(data["next_step"], schemas)] == ["run_with_logs", "waive_step"]
    with pytest.raises(GateClosed, match="own backend"):
        Workflow(Store(module_config.state_dir), case_id, lambda: "tree").require(ToolName.localize)


def test_the_tail_ends_at_the_traceback_not_at_log_records_printed_after_it():
    from pt2_bug_basher.analysis.verdict import tail_lines

    stats = ("I1204 18:40:01.123000 4242 torch/_dynamo/utils.py:773] lru_cache_stats _simplify_floor_div: "
             "CacheInfo(hits=0, misses=0, maxsize=None, currsize=0)")
    text = ("Traceback (most recent call last):\n  File \"/home/u/repro.py\", line 9, in <module>\n    f(x)\n"
            "torch._dynamo.exc.InternalTorchDynamoError: KeyError: 'reverse'\n" + "\n".join([stats] * 20) + "\n")
    tail = tail_lines(text)
    assert tail[-1] == "torch._dynamo.exc.InternalTorchDynamoError: KeyError: 'reverse'" and stats not in tail
    # a log with no plain traceback keeps its last records: they are what there is
    assert tail_lines("\n".join([stats] * 3))[-1] == stats


# --------------------------------------------------------------------------------------------
# The compile-off run: exit status first, a different failure decides nothing, whose code raised the same one

# script, the compile-off reading, whose fault, compiler at fault, category (None: any but user_error), a phrase
# of the compile-off evidence line
OFF_CASES = [
    pytest.param("compile_off_prints_tensors.py", "passes", "compiler", True, "accuracy",
                 "passes: the failure needs torch.compile", id="prints_tensors_exit_0"),
    pytest.param("compile_off_prints_value.py", "passes", None, None, "graph_break", "passes, as it must",
                 id="prints_value_exit_0"),
    pytest.param("compiled_only_attribute.py", "needs_compilation", None, None, None,
                 "an attribute only a compiled object has (_orig_mod)", id="compiled_only_attribute"),
    pytest.param("torch_assert_backend.py", "passes", "compiler", True, "runtime_crash",
                 "passes: the failure needs torch.compile", id="torch_assert_in_graph"),
    pytest.param("runtime_backend_raises.py", "passes", "own_backend", False, "user_error",
                 "a function of the script that only the compiled code calls", id="backend_callable_raises"),
    pytest.param("user_error_own_code.py", "same_failure", "program", False, "user_error",
                 "raised in the program's own code", id="user_error_own_code"),
    pytest.param("raised_inside_torch.py", "same_failure", "pytorch_outside_compiler", False, None,
                 "raised inside torch", id="raised_inside_torch"),
]


@pytest.mark.parametrize("name,reading,fault,at_fault,category,says", OFF_CASES)
def test_the_compile_off_run_decides_only_what_it_can(module_config, schemas, name, reading, fault, at_fault,
                                                      category, says):
    script = SCRIPTS / name
    case_id, data = _reproduced(module_config, script)
    verdict, off = data["verdict"], data["compile_off"]
    assert data["reproduced"], data["runs"]
    assert verdict["compile_off_reading"] == reading and verdict["fault"] == fault, verdict
    assert verdict["compiler_at_fault"] is at_fault, verdict
    if category is None:
        assert verdict["category"] not in (None, "user_error"), verdict
    else:
        assert verdict["category"] == category, verdict
    off_line = next(line for line in verdict["evidence"] if line.startswith(f"run {off['run_id']} "))
    assert says in off_line, verdict["evidence"]
    # exit 0 is a pass whatever the run printed, and the record of the run says so too
    assert off["failed"] is (off["exit_code"] != 0)
    assert Store(module_config.state_dir).get_run(off["run_id"]).result["failed"] is off["failed"]
    flow = Workflow(Store(module_config.state_dir), case_id, lambda: "tree")
    calls = _assert_calls_accepted(data["next_step"], schemas)
    if verdict["category"] == "user_error":
        assert flow.status().stopped and [c.tool for c in calls] == ["run_with_logs", "waive_step"]
    else:
        assert flow.status().stopped is None and "reproduce" in data["recorded"]
        flow.require(ToolName(calls[0].tool))


def test_a_backend_callable_that_raises_is_the_backends_bug(module_config):
    """The same answer as for a backend that raises while compiling: the script's own backend, named."""
    script = SCRIPTS / "runtime_backend_raises.py"
    case_id, data = _reproduced(module_config, script)
    verdict = data["verdict"]
    assert verdict["own_backend"].startswith(f"run ({script}:"), verdict
    assert data["failure"]["compiled_callable"] == verdict["own_backend"]
    assert "own backend run" in verdict["advice"] and "not of PyTorch's compiler" in verdict["advice"]
    with pytest.raises(GateClosed, match="own backend run"):
        Workflow(Store(module_config.state_dir), case_id, lambda: "tree").require(ToolName.localize)


def test_the_same_failure_names_the_frame_that_raised_it(module_config):
    for name, where in (("user_error_own_code.py", "user_error_own_code.py:10 in scale_for"),
                        ("raised_inside_torch.py", "torch/utils/_pytree.py:")):
        _, data = _reproduced(module_config, SCRIPTS / name)
        assert any(where in line for line in data["verdict"]["evidence"]), data["verdict"]["evidence"]
