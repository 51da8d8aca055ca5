"""Suspects in torch's source: from exceptions raised inside torch, and from a bisected lowering."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import EXAMPLES
from mcp import Client

from pt2_bug_basher.analysis.suspects import bisect_suspects, exception_suspects, helper_candidates
from pt2_bug_basher.domain.bisection import Application, BisectReport, SourceSite

pytestmark = pytest.mark.anyio
TORCH_PARENT = Path(torch.__file__).parent.parent


def source_line(relative: str, line: int) -> str:
    return (TORCH_PARENT / relative).read_text().splitlines()[line - 1]


async def test_an_exception_inside_dynamo_names_the_function_that_raised(server, workspace):
    """examples/dynamo_internal.py: Dynamo's own guard-signature check reads fn.__self__ on a staticmethod."""
    script = workspace / "dynamo_internal.py"
    shutil.copy(EXAMPLES / "dynamo_internal.py", script)
    async with Client(server) as client:
        env = await client.call_tool("check_env", {"python": sys.executable})
        case_id = env.structured_content["case_id"]
        run = (await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 1,
                                                        "script": str(script)})).structured_content
        classified = (await client.call_tool("classify_error", {"case_id": case_id,
                                                                "run_id": run["runs"][0]["run_id"]})).structured_content
    for suspects in (run["suspects"], classified["suspects"]):
        top = suspects[0]
        assert (top["file"], top["function"]) == ("torch/_dynamo/utils.py", "verify_guard_fn_signature"), suspects
        assert "__self__" in source_line(top["file"], top["line"])  # the very line that raises
        # plumbing (eval_frame, convert_frame) is never a suspect; callers follow, innermost first
        assert not any("convert_frame" in s["file"] or "eval_frame" in s["file"] for s in suspects)
        assert suspects[1]["function"] == "TENSOR_SUBCLASS_METADATA_MATCH"


def test_a_failed_comparison_has_no_suspect_in_torch_testing():
    code = "import torch\ntorch.testing.assert_close(torch.ones(2), torch.zeros(2))\n"
    stderr = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stderr
    assert "torch/testing/_comparison.py" in stderr
    assert exception_suspects(stderr) == []


def test_a_bisected_lowering_ranks_the_helpers_the_failing_run_called():
    """pow's lowering refers to pow_recursive and pow_native (used by nothing else); a run with an integer
    exponent calls only pow_recursive, so only it follows pow once calls were counted."""
    from torch._inductor.lowering import lowerings

    from pt2_bug_basher._probes.bisect_probe import where

    site = where(lowerings[torch.ops.aten.pow.Tensor_Scalar])
    assert site is not None and site["function"] == "pow"
    assert source_line(site["file"], site["line"]).startswith("def pow("), site  # past its decorator
    culprit = Application(counter=0, debug="pow_1", subject="aten.pow.Tensor_Scalar", sites=[SourceSite(**site)])
    report = BisectReport(
        backend="inductor", subsystem="lowerings", kind="bisect", bisect_number=0, applications=1, culprit=culprit,
        result="BisectionResult(backend='inductor', subsystem='lowerings', bisect_number=0, debug_info='pow_1')",
        meaning="")
    candidates = helper_candidates(SourceSite(**site))
    assert {"pow_recursive", "pow_native"} <= set(candidates), candidates
    static = [s.function for s in bisect_suspects(report)]
    assert static[0] == "pow" and {"pow_recursive", "pow_native"} <= set(static), static
    culprit.helpers_called = {name: 3 if name == "pow_recursive" else 0 for name in candidates}
    suspects = bisect_suspects(report)
    assert [s.function for s in suspects] == ["pow", "pow_recursive"], suspects
    assert source_line(suspects[1].file, suspects[1].line).startswith("def pow_recursive(")
    assert "called it 3 time(s)" in suspects[1].why and "used by no other function" in suspects[1].why
