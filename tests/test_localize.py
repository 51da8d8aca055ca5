"""localize through a real MCP client: the backend ladder on real failing repros."""

from __future__ import annotations

import shutil
import sys

import pytest
from conftest import EXAMPLES
from mcp import Client

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.mcp_server.server import create_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def module_config(tmp_path_factory) -> ServerConfig:
    root = tmp_path_factory.mktemp("loc")
    repo = root / "repo"
    shutil.copytree(EXAMPLES, repo / "examples")
    return ServerConfig(state_dir=root / "state", default_repo=repo, allowed_roots=(root,))


async def reproduced(client: Client, config: ServerConfig, name: str) -> str:
    env = await client.call_tool("check_env", {"python": sys.executable})
    assert not env.is_error, env.content[0].text
    case_id = env.structured_content["case_id"]
    run = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 2,
                                                   "script": str(config.default_repo / "examples" / name)})
    assert run.structured_content["reproduced"], run.structured_content
    return case_id


def rows(data: dict) -> dict[tuple[str, str], str]:
    return {(r["backend"], r["dynamic"]): r["outcome"] for r in data["table"]}


async def test_gate_refuses_before_reproduction(module_config):
    async with Client(create_server(module_config)) as client:
        env = await client.call_tool("check_env", {"python": sys.executable})
        result = await client.call_tool("localize", {"case_id": env.structured_content["case_id"]})
    assert result.is_error and "run_with_logs" in result.content[0].text


async def test_graph_break_fails_in_eager_so_dynamo(module_config):
    async with Client(create_server(module_config)) as client:
        case_id = await reproduced(client, module_config, "graph_break_fullgraph.py")
        result = await client.call_tool("localize", {"case_id": case_id})
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    table = rows(data)
    assert all(table[(b, "script")] == "same failure" for b in
               ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor")), data["table"]
    assert data["first_failing"] == "eager" and data["layer"] == "Dynamo"
    assert table[("eager", "False")] == table[("eager", "True")] == "same failure"
    assert "not a dynamic-shapes problem" in data["dynamic_shapes"]
    assert 'mode="source"' in data["minifier"] and "minify(" in data["next_step"]
    # exact signatures hold for a Dynamo error whatever the backend
    assert data["comparison"] == "exact signature"
    assert len(result.content[0].text) < 8000


@pytest.mark.slow
async def test_inductor_relu_injection_fails_only_in_inductor(module_config):
    async with Client(create_server(module_config)) as client:
        case_id = await reproduced(client, module_config, "runtime_error.py")
        data = (await client.call_tool("localize", {"case_id": case_id})).structured_content
    table = rows(data)
    assert [table[(b, "script")] for b in ("eager", "aot_eager", "aot_eager_decomp_partition")] == ["passes"] * 3
    assert table[("inductor", "script")] == "same failure"
    assert data["first_failing"] == "inductor" and data["layer"] == "Inductor"
    assert 'after="aot"' in data["minifier"]
    assert {r["dynamic"] for r in data["table"]} == {"script", "False", "True"}


@pytest.mark.slow
async def test_accuracy_failure_only_in_inductor(module_config):
    async with Client(create_server(module_config)) as client:
        case_id = await reproduced(client, module_config, "accuracy_mismatch.py")
        data = (await client.call_tool("localize", {"case_id": case_id})).structured_content
        table = rows(data)
        assert table[("eager", "script")] == "passes" and table[("aot_eager", "script")] == "passes"
        assert table[("inductor", "script")] == "same failure", data["table"]
        assert data["layer"] == "Inductor"
        # The debug artifacts then point at the kernel that computes the wrong output, with localize's word.
        for step in ("test", "main_check"):
            await client.call_tool("waive_step", {"case_id": case_id, "step": step,
                                                  "reason": "localisation test: no unit test needed"})
        collected = await client.call_tool("collect_debug_artifacts", {"case_id": case_id})
    assert not collected.is_error, collected.content[0].text
    artifacts = collected.structured_content
    failure = artifacts["failure"]
    assert failure["accuracy"] and failure["localized"] == "Inductor"
    assert "localize put the failure in Inductor" in failure["how"] and "may be in Dynamo" not in failure["how"]
    assert failure["mismatched_output"] is None  # one tensor compared: every output is listed
    [kernel] = failure["output_kernels"]
    assert kernel["name"] == failure["kernel"] and kernel["role"] == "writes graph output 0"
    assert kernel["aten_ops"] == ["aten.relu.default", "aten.mul.Tensor"]
    assert "auto tmp1 = tmp0 + decltype(tmp0)(1);" in kernel["excerpt"]
    assert "localize found only backend='inductor' wrong" in artifacts["next_step"]
