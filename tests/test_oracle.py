"""The one oracle "this run reproduces the case", through a real MCP client and rule by rule."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from pt2_bug_basher.analysis.compare import CANDIDATE, TRIAL, Compiled, Failure, Oracle, compiled_report, raiser
from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.execution.runs import LAUNCHER
from pt2_bug_basher.mcp_server.server import create_server

pytestmark = pytest.mark.anyio
DATA = Path(__file__).parent / "data" / "oracle"
MESSAGE = "compiled and eager outputs differ"


@pytest.fixture(scope="module")
def module_config(tmp_path_factory) -> ServerConfig:
    root = tmp_path_factory.mktemp("oracle")
    repo = root / "repo"
    shutil.copytree(DATA, repo / "data")
    return ServerConfig(state_dir=root / "state", default_repo=repo, allowed_roots=(root,))


def launched(script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(LAUNCHER), "--no-mark", "--", str(script)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env}, cwd=script.parent)


async def test_a_degenerate_candidate_of_an_accuracy_case_is_refused(module_config):
    """The reducer reaches `ok = False; assert ok, msg` (the same AssertionError, compiled or not): it keeps
    the comparison of compiled values instead, and the result is checked with compilation off."""
    script = module_config.default_repo / "data" / "constant_message_accuracy.py"
    server = create_server(module_config)
    store = server.state.store  # type: ignore[attr-defined]
    async with Client(server) as client:
        env = await client.call_tool("check_env", {"python": sys.executable})
        case_id = env.structured_content["case_id"]
        run = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 2, "script": str(script)})
        assert run.structured_content["reproduced"], run.structured_content
        assert run.structured_content["failure"]["category"] == "accuracy"
        result = await client.call_tool("minify", {"case_id": case_id, "mode": "source", "budget_s": 45})
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert data["confirmed"] and data["comparison"] in ("signature", "exception"), data
    reduced = Path(data["minimized_path"]).read_text()
    assert "allclose" in reduced and "compile(" in reduced and "ok = False" not in reduced, reduced
    # the result reproduces only compiled: with compilation off it passes
    assert launched(Path(data["minimized_path"])).returncode == 1
    off = launched(Path(data["minimized_path"]), TORCHDYNAMO_DISABLE="1")
    assert off.returncode == 0, off.stderr
    # the confirmation ran twice: compiled, and with compilation off
    confirms = [r for r in store.runs(case_id) if r.tool == "minify" and str(LAUNCHER) in r.argv]
    assert {r.env.get("TORCHDYNAMO_DISABLE") for r in confirms} == {None, "1"}
    # candidates that failed with the case's AssertionError but proved nothing were refused
    work = next((store.case_dir(case_id) / "minify").iterdir())
    refused = []
    for cand in (work / "candidates").iterdir():
        source = (cand / script.name).read_text()
        stderr = (cand / "stderr.log").read_text() if (cand / "stderr.log").exists() else ""
        if MESSAGE in stderr and "allclose" not in source:
            refused.append(source)
    assert refused, "the reducer never reached a degenerate candidate: the test no longer covers the oracle"
    assert data["source"]["candidates_run"] > 0


async def test_an_assertion_raised_in_generated_code_does_not_match_an_accuracy_case(module_config):
    stderr = launched(DATA / "assert_in_generated_code.py").stderr
    seen = Failure(category="accuracy", exception_type="AssertionError", message=MESSAGE,
                   compiled=compiled_report(stderr), raised_by=raiser(stderr))
    assert seen.compiled is not None and seen.compiled.frames_ok > 0
    assert seen.raised_by is not None and seen.raised_by.generated
    wanted = Failure(category="accuracy", exception_type="AssertionError", message=MESSAGE)
    match = Oracle(wanted, TRIAL, script_name="assert_in_generated_code.py").judge_failure(seen)
    assert not match.matches and "generated code" in match.reason
    # the script's own assertion, after compiled code ran, does match
    own = launched(DATA / "constant_message_accuracy.py").stderr
    mine = seen.model_copy(update={"compiled": compiled_report(own), "raised_by": raiser(own)})
    assert Oracle(wanted, TRIAL, script_name="constant_message_accuracy.py").judge_failure(mine).matches


REPRO = Failure(signature=f"AssertionError: {MESSAGE} @ repro.py:<module>", category="accuracy",
                exception_type="AssertionError", message=MESSAGE)


def seen_as(compiled: Compiled | None, file: str = "/w/repro.py", *, in_torch: bool = False,
            generated: bool = False) -> Failure:
    from pt2_bug_basher.analysis.compare import Raiser

    return REPRO.model_copy(update={"signature": None, "compiled": compiled,
                                    "raised_by": Raiser(file=file, in_torch=in_torch, generated=generated)})


def test_without_a_compiled_call_nothing_reproduces():
    oracle = Oracle(REPRO, CANDIDATE, script_name="repro.py")
    ran = Compiled(frames=1, frames_ok=1)
    assert oracle.judge_failure(seen_as(ran)).level == "exception"
    no_report = oracle.judge_failure(seen_as(None))
    assert not no_report.matches and "no report" in no_report.reason
    nothing = oracle.judge_failure(seen_as(Compiled()))
    assert not nothing.matches and "compiled nothing" in nothing.reason
    # a graph a backend compiled counts (PyTorch's minifier repros call the backend without Dynamo)
    assert oracle.judge_failure(seen_as(Compiled(backend_compiles=1))).matches
    # without the rule (runs not made through the launcher) the failure alone decides
    from pt2_bug_basher.analysis.compare import RERUN

    assert Oracle(REPRO, RERUN).judge_failure(seen_as(None)).matches


def test_a_candidate_of_a_case_through_export_alone_needs_no_compiled_call():
    """torch.export converts no frame Dynamo counts (an eager torch.cond does): a reduced export repro is
    judged on its failure and where the script raised it, not on Dynamo's counters."""
    from pt2_bug_basher.analysis.compare import EXPORT_CANDIDATE

    oracle = Oracle(REPRO, EXPORT_CANDIDATE, script_name="repro.py")
    for compiled in (Compiled(), Compiled(frames=1, frames_ok=0), None):
        assert oracle.judge_failure(seen_as(compiled)).matches, compiled
        assert not Oracle(REPRO, CANDIDATE, script_name="repro.py").judge_failure(seen_as(compiled)).matches
    # the own check still holds: an assertion raised in torch is another failure
    inside = oracle.judge_failure(seen_as(Compiled(), "/site-packages/torch/export/x.py", in_torch=True))
    assert not inside.matches and "in torch" in inside.reason


def test_an_accuracy_failure_is_the_scripts_own_comparison_after_compiled_code_ran():
    oracle = Oracle(REPRO, TRIAL, script_name="repro.py")
    ran = Compiled(frames=1, frames_ok=1)
    assert oracle.judge_failure(seen_as(ran)).matches
    refusals = {
        "in torch": seen_as(ran, "/site-packages/torch/_inductor/x.py", in_torch=True),
        "generated code": seen_as(ran, "<eval_with_key>.1", generated=True),
        "not in repro.py": seen_as(ran, "/w/helper.py"),
        "before any compiled code ran": seen_as(Compiled(frames=1, frames_ok=0)),
    }
    for why, seen in refusals.items():
        match = oracle.judge_failure(seen)
        assert not match.matches and why in match.reason, (why, match.reason)
    # a crash case is not held to it: a compiler's exception is raised in torch
    crash = REPRO.model_copy(update={"category": "backend_compiler"})
    assert Oracle(crash, TRIAL, script_name="repro.py").judge_failure(
        seen_as(ran, "/site-packages/torch/_inductor/x.py", in_torch=True).model_copy(
            update={"category": "backend_compiler"})).matches


async def test_a_result_that_fails_with_compilation_off_too_is_not_confirmed(tmp_path):
    from pt2_bug_basher.execution.runner import run_process
    from pt2_bug_basher.reduce.ladder import fake_result

    degenerate = tmp_path / "constant_message_accuracy.py"
    degenerate.write_text("import torch\nok = False\ntorch.compile(torch.relu, backend='eager')(torch.ones(2))\n"
                          f"assert ok, {MESSAGE!r}\n")
    shutil.copyfile(DATA / "constant_message_accuracy.py", tmp_path / "kept.py")

    async def run(script: Path, name: str, **env: str):
        out = tmp_path / name
        out.mkdir()
        outcome = await run_process([sys.executable, str(LAUNCHER), "--no-mark", "--", str(script)], cwd=tmp_path,
                                    env={**os.environ, **env}, timeout_s=120, stdout_path=out / "stdout.log",
                                    stderr_path=out / "stderr.log")
        return fake_result(name, outcome, out / "stdout.log", out / "stderr.log")

    oracle = Oracle(REPRO, CANDIDATE, script_name=degenerate.name, off_passes=True)
    compiled, off = await run(degenerate, "on"), await run(degenerate, "off", TORCHDYNAMO_DISABLE="1")
    assert oracle.judge(compiled).matches  # it compiled something, and its own assert failed
    refused = oracle.confirm(compiled, off)
    assert not refused.matches and "with compilation off too" in refused.reason
    # a case that failed with compilation off as well (torch.export) is not held to it
    assert Oracle(REPRO, CANDIDATE, script_name=degenerate.name).confirm(compiled, off).matches
    kept = Oracle(REPRO, CANDIDATE, script_name="kept.py", off_passes=True)
    confirmed = kept.confirm(await run(tmp_path / "kept.py", "kept"),
                             await run(tmp_path / "kept.py", "kept-off", TORCHDYNAMO_DISABLE="1"))
    assert confirmed.matches and "with compilation off it does not fail" in confirmed.reason


def test_a_fullgraph_failure_reports_the_frame_dynamo_began_converting(tmp_path):
    """fullgraph=True converts without Dynamo's frame counters: the report still shows the attempt."""
    script = tmp_path / "fullgraph.py"
    script.write_text("import torch\n\ndef f(x):\n    if x.sum() > 0:\n        return x + 1\n    return x\n\n"
                      "torch.compile(f, fullgraph=True, backend='eager')(torch.ones(2))\n")
    ran = launched(script)
    assert ran.returncode == 1 and "Unsupported" in ran.stderr
    report = compiled_report(ran.stderr)
    assert report is not None and report.frames >= 1 and report.frames_ok == 0 and report.any


def test_the_reducer_judges_candidates_of_an_export_case_without_a_compiled_call(tmp_path):
    """minify picks the rules from localize's layer for this failure, else from what the script calls."""
    import sys

    from pt2_bug_basher.analysis.compare import EXPORT_CANDIDATE
    from pt2_bug_basher.case.store import Store
    from pt2_bug_basher.domain.evidence import LocalizeRecord
    from pt2_bug_basher.reduce.ladder import Reference
    from pt2_bug_basher.reduce.minify import candidate_rules

    store = Store(tmp_path / "state")
    case = store.create_case(str(tmp_path), sys.executable, {})
    ref = Reference(case.case_id, tmp_path / "repro.py", [], "SIG-1", "export", "AssertionError", "x", {}, 1.0, [])
    exported = "ep = torch.export.export(M(), (x,))\n"
    compiled = "out = torch.compile(f)(x)\n"
    assert candidate_rules(store, case, ref, exported) is EXPORT_CANDIDATE
    assert candidate_rules(store, case, ref, exported + compiled) is CANDIDATE
    store.set_localization(case.case_id, LocalizeRecord(layer="Dynamo", signature="SIG-1"))
    assert candidate_rules(store, case, ref, exported) is CANDIDATE  # localize's runs say more than the text
    store.set_localization(case.case_id, LocalizeRecord(layer="export", signature="SIG-1"))
    assert candidate_rules(store, case, ref, exported + compiled) is EXPORT_CANDIDATE
    store.set_localization(case.case_id, LocalizeRecord(layer="export", signature="SIG-other"))  # another failure's
    assert candidate_rules(store, case, ref, compiled) is CANDIDATE
