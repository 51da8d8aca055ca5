"""collect_debug_artifacts through a real in-process MCP client, on real Inductor runs (CPU).

Inductor runs are expensive (5-20 s each on a shared machine), so one session fixture makes all of
them, in one case: a training model (forward and backward graphs, C++ kernels, an output_code.py
large enough for two pages), the same run again through its run_id with trace=True, and PyTorch's
relu-injection testing hook in its compile_error and runtime_error modes. The tests then check the
results against the files on disk, read independently.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from pt2_bug_basher.artifacts.fx_graph import parse_annotation, parse_fx_graph
from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.execution import isa_builds
from pt2_bug_basher.mcp_server.server import create_server

MM_CHAIN = 90  # enough matmuls for a backward output_code.py over one 64 KiB page

MODEL = f'''
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.w = torch.nn.Parameter(torch.randn(8, 8) / 8)

    def forward(self, x):
        y = torch.relu(self.lin(x)).sin() + x.cos()
        for _ in range({MM_CHAIN}):
            y = torch.mm(y, self.w)
        return y


torch.manual_seed(0)
model = Model()
x = torch.randn(8, 8, requires_grad=True)
torch.compile(model)(x).sum().backward()
print("ok")
'''

RELU_BUG = '''
import torch
import torch._inductor.config as inductor_config

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "{mode}"


def f(x):
    return torch.relu(x * 2) + 1


print(torch.compile(f)(torch.randn(8, 8)).sum())
'''

# A wrong result, not an exception: the relu hook's accuracy mode makes the C++ kernel compute x + 1 for
# relu(x). Only the second item of the compared tuple is wrong; the first comes from an extern mm.
ACCURACY_BUG = '''
import torch
import torch._inductor.config as inductor_config

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "accuracy"


def f(x):
    return torch.mm(x, x), torch.relu(x) * 2


x = torch.linspace(-2, 2, 64).reshape(8, 8)
torch.testing.assert_close(torch.compile(f)(x), f(x))
'''

WAIVE_REASON = "artifact-indexing test: no unit test needed"


@dataclass
class Session:
    config: ServerConfig
    repo: Path
    case_id: str
    refused: Any = None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)


# A test that reads the session fixture waits for its Inductor compiles (about 85 s): not the fast tier.
INDUCTOR = pytest.mark.slow


@pytest.fixture(scope="session")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    root = tmp_path_factory.mktemp("artifacts")
    repo = root / "repo"
    repo.mkdir()
    (repo / "model.py").write_text(MODEL)
    for mode in ("compile_error", "runtime_error"):
        (repo / f"{mode}.py").write_text(RELU_BUG.format(mode=mode))
    (repo / "accuracy.py").write_text(ACCURACY_BUG)
    config = ServerConfig(state_dir=root / "state", default_repo=repo, allowed_roots=(root,))
    holder: dict[str, Session] = {}

    async def main() -> None:
        async with Client(create_server(config)) as client:
            opened = await client.call_tool("check_env", {"python": sys.executable})
            assert not opened.is_error, opened.content
            case_id = opened.structured_content["case_id"]
            sess = holder["s"] = Session(config, repo, case_id)
            sess.refused = await client.call_tool(
                "collect_debug_artifacts", {"case_id": case_id, "script": str(repo / "model.py")})
            for step in ("test", "main_check"):
                waived = await client.call_tool("waive_step", {"case_id": case_id, "step": step,
                                                               "reason": WAIVE_REASON})
                assert not waived.is_error, waived.content

            async def collect(key: str, **arguments: Any) -> None:
                started = time.monotonic()
                result = await client.call_tool("collect_debug_artifacts", {"case_id": case_id, **arguments})
                sess.seconds[key] = round(time.monotonic() - started, 1)
                assert not result.is_error, result.content
                sess.results[key] = result.structured_content
                sess.results[key]["_bytes"] = len(json.dumps(result.structured_content).encode())

            await collect("model", script=str(repo / "model.py"))
            await collect("again", run_id=sess.results["model"]["run_id"], trace=True)
            await collect("compile_error", script=str(repo / "compile_error.py"))
            await collect("runtime_error", script=str(repo / "runtime_error.py"))
            await collect("accuracy", script=str(repo / "accuracy.py"))
            status = await client.call_tool("get_workflow", {"case_id": case_id})
            sess.status = status.structured_content["case"]

    anyio.run(main)
    sess = holder["s"]
    sizes = {key: result["_bytes"] for key, result in sess.results.items()}
    print(f"\ncollect_debug_artifacts: seconds {sess.seconds}, result bytes {sizes}", file=sys.stderr)
    return sess


def _file(result: dict[str, Any], uri: str) -> Path:
    """The file behind an artifact URI, found on disk without the server's help."""
    rel = uri.split("/artifacts/", 1)[1].split("?", 1)[0]
    return Path(result["debug_dir"]).parent / rel


def _graph(result: dict[str, Any], role: str) -> dict[str, Any]:
    matches = [g for g in result["graphs"] if g["role"] == role]
    assert len(matches) == 1, [g["name"] for g in result["graphs"]]
    return matches[0]


# -- the gate ----------------------------------------------------------------------------------------


@INDUCTOR
def test_refused_without_a_registered_test(session):
    assert session.refused.is_error
    text = session.refused.content[0].text
    assert "register_test" in text and "collect_debug_artifacts refused" in text
    assert "waive_step" in text


# -- a compiled training model -------------------------------------------------------------------------


@INDUCTOR
def test_graphs_and_kernels_of_a_compiled_model(session):
    result = session.results["model"]
    assert result["failed"] is False and result["exit_code"] == 0
    assert result["graph_count"] == 2
    assert [g["role"] for g in result["graphs"]] == ["forward", "backward"]
    kernel_total = 0
    for graph in result["graphs"]:
        assert graph["compile_id"] == "[0/0]"
        assert {"fx_graph_readable.py", "fx_graph_transformed.py", "ir_pre_fusion.txt", "ir_post_fusion.txt",
                "output_code.py"} <= set(graph["files"])
        code = _file(result, graph["dir_uri"] + "output_code.py").read_text()
        # Kernels: counted here straight from the generated module.
        defined = re.findall(r"^(cpp_fused_\w+) = async_compile\.cpp_pybinding\(", code, re.M)
        assert defined and graph["kernel_count"] == len(defined)
        assert [k["name"] for k in graph["kernels"]] == defined
        assert all(k["kind"] == "cpp" for k in graph["kernels"])
        kernel_total += len(defined)
        assert graph["extern_calls"].get("mm") == len(re.findall(r"extern_kernels\.mm\(", code))
        # Nodes: the readable FX graph's op lines, its signature's inputs, and one output node.
        fx = _file(result, graph["dir_uri"] + "fx_graph_readable.py").read_text()
        op_lines = [line for line in fx.splitlines() if " = torch.ops." in line]
        signature = next(line for line in fx.splitlines() if "def forward(self" in line)
        inputs = signature.count(': "')
        assert graph["op_total"] == len(op_lines)
        assert graph["input_count"] == inputs
        assert graph["node_count"] == inputs + len(op_lines) + 1
        for op, count in graph["ops"].items():
            assert count == sum(f"torch.ops.{op}(" in line for line in op_lines), op
        assert len(graph["inputs"]) == min(inputs, 6) and graph["inputs"][0].endswith(': f32[8, 8]')
    forward, backward = _graph(result, "forward"), _graph(result, "backward")
    assert forward["ops"]["aten.mm.default"] == MM_CHAIN
    assert {"aten.addmm.default", "aten.relu.default", "aten.sin.default", "aten.cos.default"} <= set(forward["ops"])
    assert forward["extern_calls"] == {"mm": MM_CHAIN, "addmm": 1}
    fused = forward["kernels"][0]
    assert fused["fx_nodes_from"] == "provenance tracking"
    assert {"relu", "sin", "cos", "add"} <= set(fused["fx_nodes"])
    assert backward["ops"]["aten.mm.default"] == 2 * MM_CHAIN + 2  # and the two of addmm's backward
    assert result["kernel_count"] == kernel_total
    kinds = result["files_by_kind"]
    assert kinds["output_code"] == 2 and kinds["fx_graph"] == 2 and kinds["ir_post_fusion"] == 2
    assert kinds["dynamo_debug_log"] == 1
    assert result["failure"] is None
    assert "trace=True" in " ".join(result["notes"])
    # The full index is on disk, uncapped.
    index = json.loads(_file(result, result["index"]).read_text())
    assert len(index["graphs"]) == 2 and len(index["graphs"][1]["inputs"]) == backward["input_count"]
    assert all(_file(result, f["uri"]).is_file() for f in index["files"])
    # empty logs are counted, not listed
    assert all(f["bytes"] > 0 for f in result["files"]), result["files"]
    empty = [f for f in index["files"] if f["bytes"] == 0 and f["graph"] is None]
    said = [n for n in result["notes"] if "empty file(s) not listed" in n]
    assert len(said) == (1 if empty else 0), (empty, result["notes"])
    if empty:
        assert said[0].startswith(f"{len(empty)} empty file(s)"), said


@INDUCTOR
def test_evidence_is_recorded(session):
    by_step = {s["step"]: s for s in session.status["steps"]}
    artifacts = by_step["artifacts"]
    assert artifacts["status"] == "done"
    assert artifacts["run_id"] == session.results["accuracy"]["run_id"]
    assert "1 graphs, 1 kernels" in artifacts["evidence"] and "cpp_fused_mul_relu_0" in artifacts["evidence"]
    for key in ("model", "again", "compile_error", "runtime_error", "accuracy"):
        assert session.results[key]["recorded"] == ["artifacts"]
        assert session.results[key]["next_step"]
        # the agent reads the files through resources; a wrong result also names who generated its kernel
        assert session.results[key]["_bytes"] < (9000 if key == "accuracy" else 8000), key


@INDUCTOR
def test_a_second_run_still_yields_full_artifacts(session):
    first, again = session.results["model"], session.results["again"]
    assert again["debug_dir"] != first["debug_dir"]
    assert again["command"] == first["command"]
    # a new cache without the graph caches, not FORCE_DISABLE_CACHES (a temporary directory per compile), so
    # Inductor's ISA probes are the machine's copies, not built again
    added = again["env_added"]
    assert (added["TORCHINDUCTOR_FX_GRAPH_CACHE"], added["TORCHINDUCTOR_AUTOGRAD_CACHE"]) == ("0", "0")
    assert "TORCHINDUCTOR_FORCE_DISABLE_CACHES" not in added
    cache = Path(again["debug_dir"]) / "inductor_cache"
    probes = isa_builds.probe_keys(cache)
    assert probes and probes <= isa_builds.probe_keys(isa_builds.shared_dir())
    assert [(g["role"], g["kernel_count"], g["node_count"], g["has_output_code"]) for g in again["graphs"]] == \
        [(g["role"], g["kernel_count"], g["node_count"], g["has_output_code"]) for g in first["graphs"]]
    assert again["kernel_count"] == first["kernel_count"] > 0


@INDUCTOR
def test_trace_runs_tlparse_and_links_the_dynamo_graph(session):
    again = session.results["again"]
    trace = again["trace"]
    assert trace["error"] is None and trace["tlparse_run_id"]
    assert trace["report"].endswith("/tlparse/index.html") and _file(again, trace["report"]).is_file()
    assert [c["compile_id"] for c in trace["compiles"]] == ["[0/0]"]
    dynamo = _file(again, trace["compiles"][0]["dynamo_graph"]).read_text()
    forward = _graph(again, "forward")
    assert forward["related"]["dynamo_graph"] == trace["compiles"][0]["dynamo_graph"]
    assert "aot_forward_graph" in forward["related"]
    assert "aot_backward_graph" in _graph(again, "backward")["related"]
    # Dynamo's printout carries strides and devices: "f32[8, 8][8, 1]cpu".
    stats = parse_fx_graph(dynamo)
    assert stats is not None and stats.inputs
    x = stats.inputs[-1]
    assert x.annotation == "f32[8, 8][8, 1]cpu"
    assert (x.dtype, x.shape, x.stride, x.device) == ("f32", "[8, 8]", "[8, 1]", "cpu")
    assert stats.ops["torch.mm"] == MM_CHAIN
    assert parse_annotation("Sym(s0)") == {}


# -- failures ------------------------------------------------------------------------------------------


@INDUCTOR
def test_compile_error_points_at_the_graph_and_kernel(session):
    result = session.results["compile_error"]
    assert result["failed"] and result["exit_code"] == 1
    failure = result["failure"]
    graph = _graph(result, "inference")
    assert failure["graph"] == graph["name"]
    assert failure["phase"] == "compile"
    assert "InductorError" in failure["exception_type"]
    assert "error" in failure["compiler_error"]
    code = _file(result, graph["dir_uri"] + "output_code.py").read_text().splitlines()
    kernels = re.findall(r"^(cpp_fused_\w+) = ", "\n".join(code), re.M)
    assert kernels and failure["kernel"] == kernels[0]
    # The line the C++ compiler rejected, in output_code.py.
    assert "compile error!" in code[failure["output_code_line"] - 1]
    assert failure["code_line"] == code[failure["output_code_line"] - 1].strip()
    assert "relu" in failure["fx_nodes"]
    assert graph["kernels"][0]["name"] in result["next_step"]


@INDUCTOR
def test_runtime_error_maps_the_generated_frame_to_the_kernel(session):
    result = session.results["runtime_error"]
    failure = result["failure"]
    graph = _graph(result, "inference")
    assert failure["phase"] == "runtime"
    assert failure["exception_type"] == "RuntimeError"
    assert failure["graph"] == graph["name"]
    assert failure["kernel"] == graph["kernels"][0]["name"]
    assert failure["generated_frame"].startswith(result["debug_dir"])
    code = _file(result, failure["output_code"]).read_text().splitlines()
    assert code[failure["output_code_line"] - 1].strip() == failure["code_line"]
    assert failure["code_line"].startswith(failure["kernel"] + "(")
    assert failure["fx_nodes_from"] == "provenance tracking"
    assert {"mul", "relu", "add"} == set(failure["fx_nodes"])
    assert "calls " + failure["kernel"] in failure["how"]


@INDUCTOR
def test_accuracy_failure_names_the_kernel_that_writes_the_wrong_output(session):
    result = session.results["accuracy"]
    assert result["failed"] and result["exit_code"] == 1
    failure = result["failure"]
    graph = _graph(result, "inference")
    code = _file(result, graph["dir_uri"] + "output_code.py").read_text()
    # Read independently: the buffers the wrapper returns, and the kernel call that receives the second one.
    returned = re.findall(r"\w+", re.search(r"^        return \((.*)\)$", code, re.M).group(1))
    assert len(returned) == 2
    writer = re.search(rf"^        (cpp_fused_\w+)\((?:\w+, )*{returned[1]}\b", code, re.M).group(1)
    assert failure["accuracy"] and failure["phase"] == "runtime"
    assert failure["mismatched_output"] == 1  # "The failure occurred for item [1]"
    assert failure["graph"] == graph["name"] and failure["kernel"] == writer
    assert "may be in Dynamo" not in failure["how"] and writer in failure["how"]
    assert "localize was not run" in failure["how"]
    # Only the writer of output 1: the extern mm behind output 0 is not named.
    assert [k["name"] for k in failure["output_kernels"]] == [writer]
    kernel = failure["output_kernels"][0]
    assert kernel["role"].startswith("writes graph output 1") and kernel["kind"] == "cpp"
    assert set(kernel["aten_ops"]) == {"aten.relu.default", "aten.mul.Tensor"}
    assert set(kernel["fx_nodes"]) == {"relu", "mul"} and kernel["fx_nodes_from"] == "provenance tracking"
    # The excerpt is the kernel's own code, with the line that gives the bug away (x + 1 for relu(x)).
    lines = code.splitlines()
    assert lines[kernel["line"] - 1].startswith(f"{writer} = async_compile.cpp_pybinding(")
    assert writer in lines[kernel["call_line"] - 1]
    body = {line.strip() for line in lines}
    assert all(line.strip() in body for line in kernel["excerpt"].splitlines())
    # as generated: braces and indentation kept, so the loop nest reads as it runs
    assert any(line.strip() == "}" for line in kernel["excerpt"].splitlines())
    assert any(line.startswith(" ") for line in kernel["excerpt"].splitlines())
    assert "auto tmp1 = tmp0 + decltype(tmp0)(1);" in kernel["excerpt"]
    # who generated it: the relu override that returned `tmp0 + decltype(tmp0)(1)` (the injected bug), named
    # with the kernel line holding it; the store's writer is named too
    origins = {o["function"]: o for o in kernel["origins"]}
    relu = [o for name, o in origins.items() if name.endswith("Overrides.relu")]
    assert relu and all(o["file"] == "torch/_inductor/codegen/cpp.py" and o["made"] >= 1 for o in relu), origins
    assert all("decltype(tmp0)(1)" in o["first"] for o in relu)
    assert any(o["wrote"] and ".store(" in o["first"] for o in kernel["origins"]), kernel["origins"]
    lines_of_kernel = {line.strip() for line in code.splitlines()}
    assert all(any(line.startswith(o["first"]) for line in lines_of_kernel) for o in kernel["origins"])
    # the relu override comes before the helpers that produced many of the kernel's lines
    assert all(o["wrote"] + o["made"] <= 2 for o in kernel["origins"][:3]), kernel["origins"]
    assert "#include" not in kernel["excerpt"] and len(kernel["excerpt"]) <= 1200
    assert _file(result, kernel["output_code"]) == _file(result, graph["dir_uri"] + "output_code.py")
    # The case has no reproduction yet (localize would refuse): reproduce first, then localize.
    assert writer in result["next_step"] and "then localize(" in result["next_step"]
    assert f'reproduce it (run_with_logs(case_id="{session.case_id}", script="{session.repo / "accuracy.py"}"' \
        in result["next_step"]


# -- resources -----------------------------------------------------------------------------------------


@pytest.mark.anyio
@INDUCTOR
async def test_resources_page_through_a_large_output_code(session):
    result = session.results["model"]
    backward = _graph(result, "backward")
    uri = backward["dir_uri"] + "output_code.py"
    raw = _file(result, uri).read_bytes()
    assert len(raw) > 64 * 1024, "the model must generate an output_code.py over one page"
    async with Client(create_server(session.config)) as client:
        one = (await client.read_resource(uri)).contents[0].text
        two = (await client.read_resource(uri + "?page=2")).contents[0].text
        missing = None
        try:
            await client.read_resource(uri + "?page=99")
        except Exception as exc:  # noqa: BLE001 - any error the client raises for a failed read
            missing = str(exc)
    pages = -(-len(raw) // (64 * 1024))
    assert one.endswith(f"[page 1 of {pages}, {len(raw)} bytes in all; next: {uri}?page=2]")
    body_one = one[: one.rindex("\n[page 1 of")]
    body_two = two[: two.rindex("\n[page 2 of")]
    assert (body_one + body_two).encode() == raw[: len((body_one + body_two).encode())]
    assert len(body_one.encode()) == 64 * 1024
    assert "page 99 does not exist" in (missing or "")


@pytest.mark.anyio
@INDUCTOR
async def test_artifact_resources_stay_in_the_case(session):
    result = session.results["model"]
    async with Client(create_server(session.config)) as client:
        text = (await client.read_resource(result["index"])).contents[0].text
        assert json.loads(text)["run_id"] == result["run_id"]
        for uri in (
            f"case://{session.case_id}/artifacts/../../cases.sqlite3",
            f"case://{session.case_id}/artifacts/%2E%2E/%2E%2E/cases.sqlite3",
            f"case://{session.case_id}/artifacts/nope/output_code.py",
            "case://case-nope/artifacts/x/output_code.py",
        ):
            with pytest.raises(MCPError):
                await client.read_resource(uri)


# -- bad input -----------------------------------------------------------------------------------------


@pytest.mark.anyio
@INDUCTOR
async def test_bad_input_is_a_tool_error(session, tmp_path_factory):
    # A .py file outside the roots runs from a copy the case keeps; anything else there is refused.
    outside = tmp_path_factory.mktemp("outside") / "repro.sh"
    outside.write_text("echo hi\n")
    tlparse_run = session.results["again"]["trace"]["tlparse_run_id"]
    async with Client(create_server(session.config)) as client:
        async def call(**arguments: Any):
            return await client.call_tool("collect_debug_artifacts", {"case_id": session.case_id, **arguments})

        unknown = await call(run_id="run-20200101-deadbeef")
        assert unknown.is_error and "unknown run_id 'run-20200101-deadbeef'" in unknown.content[0].text
        escaped = await call(script=str(outside))
        assert escaped.is_error and "outside the case's repository and the allowed roots" in escaped.content[0].text
        missing = await call(script=str(session.repo / "nope.py"))
        assert missing.is_error and "does not exist" in missing.content[0].text
        both = await call(script=str(session.repo / "model.py"), run_id=session.results["model"]["run_id"])
        assert both.is_error and "not both" in both.content[0].text
        not_python = await call(run_id=tlparse_run)
        assert not_python.is_error and "did not run a script" in not_python.content[0].text
        nothing = await call()
        assert nothing.is_error and "no script to rerun" in nothing.content[0].text
        bad_env = await call(script=str(session.repo / "model.py"), env={"LD_PRELOAD": "x.so"})
        assert bad_env.is_error and "LD_PRELOAD" in bad_env.content[0].text
        bad_timeout = await call(script=str(session.repo / "model.py"), timeout_s=-1)
        assert bad_timeout.is_error and "timeout_s" in bad_timeout.content[0].text
        other_case = await client.call_tool("collect_debug_artifacts", {"case_id": "case-nope"})
        assert other_case.is_error and "unknown case_id" in other_case.content[0].text


# -- parsing, without a compile -----------------------------------------------------------------------

TRITON_OUTPUT_CODE = '''# AOT ID: ['3_inference']
from torch._inductor.async_compile import AsyncCompile
async_compile = AsyncCompile()


# kernel path: /tmp/torchinductor_u/zq/czqexample.py
# Topologically Sorted Source Nodes: [mul, relu], Original ATen: [aten.mul, aten.relu]
# Source node to ATen node mapping:
#   relu => relu
triton_poi_fused_mul_relu_0 = async_compile.triton('triton_poi_fused_mul_relu_0', \'\'\'
import triton
import triton.language as tl

@triton.jit
def triton_poi_fused_mul_relu_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 64
    xoffset = tl.program_id(0) * XBLOCK
    tmp0 = tl.load(in_ptr0 + xoffset)
    tl.store(out_ptr0 + xoffset, tmp0)
\'\'\', device_str='cuda')


# kernel path: /tmp/torchinductor_u/ab/cabexample.py
triton_red_fused_sum_1 = async_compile.triton('triton_red_fused_sum_1', \'\'\'
@triton.jit
def triton_red_fused_sum_1(in_ptr0, out_ptr0, xnumel, r0_numel):
    pass
\'\'\', device_str='cuda')


async_compile.wait(globals())
del async_compile

class Runner:
    def call(self, args):
        arg0_1, = args
        buf0 = empty_strided_cuda((8, 8), (8, 1), torch.float32)
        stream0 = get_raw_stream(0)
        triton_poi_fused_mul_relu_0.run(arg0_1, buf0, 64, stream=stream0)
        buf1 = empty_strided_cuda((), (), torch.float32)
        triton_red_fused_sum_1.run(buf0, buf1, 1, 64, stream=stream0)
        extern_kernels.mm(buf0, buf0, out=buf2)
        return (buf1, )
'''

TRITON_FX = '''class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[8, 8][8, 1]cuda:0", s0: "Sym(s0)"):
        # File: repro.py:5 in f, code: return torch.relu(x * 2).sum()
        mul: "f32[8, 8][8, 1]cuda:0" = torch.ops.aten.mul.Tensor(arg0_1, 2);  arg0_1 = None
        relu: "f32[8, 8][8, 1]cuda:0" = torch.ops.aten.relu.default(mul);  mul = None
        sum_1: "f32[][]cuda:0" = torch.ops.aten.sum.default(relu);  relu = None
        return (sum_1,)

    class submod_0(torch.nn.Module):
        def forward(self, x):
            neg = torch.ops.aten.neg.default(x)
            return (neg,)
'''


def test_triton_output_code_and_a_frame_in_a_kernel_module(tmp_path):
    from pt2_bug_basher.analysis.output_code import parse_output_code
    from pt2_bug_basher.artifacts.graphs import load_graph
    from pt2_bug_basher.artifacts.index import walk
    from pt2_bug_basher.artifacts.locate import locate_failure

    stamp = tmp_path / "20260101-000000-abcdef"
    graph_dir = stamp / "torch_compile_debug" / "run_1-pid_1" / "torchinductor" / "model__3_inference_5.0"
    graph_dir.mkdir(parents=True)
    (graph_dir / "output_code.py").write_text(TRITON_OUTPUT_CODE)
    (graph_dir / "fx_graph_readable.py").write_text(TRITON_FX)
    (graph_dir / "graph_diagram.svg").write_text("<svg/>")
    (stamp / "torch_compile_debug" / "mystery.bin2").write_text("?")

    code = parse_output_code(TRITON_OUTPUT_CODE)
    assert [(k.name, k.kind) for k in code.kernels] == [
        ("triton_poi_fused_mul_relu_0", "triton pointwise"), ("triton_red_fused_sum_1", "triton reduction")]
    assert code.kernels[0].source_nodes == ["mul", "relu"]
    assert code.extern_calls == {"mm": 1}
    assert code.kernel_called_at(code.kernels[1].call_lines[0]).name == "triton_red_fused_sum_1"

    walked = walk(stamp)
    kinds = {Path(f.rel).name: f.kind for f in walked.files}
    assert kinds == {"output_code.py": "output_code", "fx_graph_readable.py": "fx_graph",
                     "graph_diagram.svg": "graph_diagram", "mystery.bin2": "other"}
    graph = load_graph(walked.graph_dirs[0], stamp, {"model__3_inference_5.0": "[1/0]"})
    assert graph.role == "inference" and graph.compile_id == "[1/0]"
    assert graph.fx.node_count == 2 + 3 + 1 and graph.fx.subgraphs == 1
    assert graph.fx.inputs[0].device == "cuda:0" and graph.fx.inputs[1].annotation == "Sym(s0)"

    traceback = """Traceback (most recent call last):
  File "/home/u/repro.py", line 9, in <module>
    f(x)
  File "/tmp/torchinductor_u/zq/czqexamplexxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.py", line 14, in triton_poi_fused_mul_relu_0
    tmp0 = tl.load(in_ptr0 + xoffset)
RuntimeError: CUDA error: an illegal memory access was encountered
"""
    failure = locate_failure(traceback, [graph], stamp, "case-x", stamp.name, 1, None)
    assert failure.exception_type == "RuntimeError"
    assert failure.graph == "model__3_inference_5.0" and failure.kernel == "triton_poi_fused_mul_relu_0"
    assert failure.phase == "runtime"
    assert failure.fx_nodes == ["mul", "relu"] and failure.fx_nodes_from == "output_code comments"
    assert failure.output_code_line == code.kernels[0].start
    assert failure.output_code.startswith("case://case-x/artifacts/20260101-000000-abcdef/torch_compile_debug/")

    nowhere = locate_failure("Traceback (most recent call last):\n  File \"/home/u/r.py\", line 1, in <module>\n"
                             "torch._dynamo.exc.Unsupported: boom\n", [graph], stamp, "case-x", stamp.name, 1, None)
    assert nowhere.graph is None and nowhere.kernel is None and "not in a kernel" in nowhere.how


ASSERT_CLOSE_FAILURE = """Traceback (most recent call last):
  File "/home/u/repro.py", line 12, in <module>
    torch.testing.assert_close(torch.compile(f)(x), f(x))
AssertionError: Tensor-likes are not close!

Mismatched elements: 1 / 1 (100.0%)
Greatest absolute difference: 3.0 at index (0,) (up to 1e-05 allowed)
"""


def test_a_wrong_result_is_followed_back_from_the_output_through_triton_kernels(tmp_path):
    from pt2_bug_basher.artifacts.graphs import load_graph
    from pt2_bug_basher.artifacts.index import walk
    from pt2_bug_basher.artifacts.locate import locate_failure

    stamp = tmp_path / "20260101-000000-aaaaaa"
    graph_dir = stamp / "torch_compile_debug" / "run_1-pid_1" / "torchinductor" / "model__0_inference_0.0"
    graph_dir.mkdir(parents=True)
    (graph_dir / "output_code.py").write_text(TRITON_OUTPUT_CODE)
    (graph_dir / "fx_graph_readable.py").write_text(TRITON_FX)
    graphs = [load_graph(p, stamp, {}) for p in walk(stamp).graph_dirs]

    failure = locate_failure(ASSERT_CLOSE_FAILURE, graphs, stamp, "case-x", stamp.name, 1, None, accuracy=True,
                             layer="Inductor")
    # The wrapper returns buf1, written by the reduction; the reduction reads buf0, written by the pointwise
    # kernel; the extern mm writes buf2, which is not returned.
    assert [(k.name, k.role) for k in failure.output_kernels] == [
        ("triton_red_fused_sum_1", "writes graph output 0"),
        ("triton_poi_fused_mul_relu_0", "feeds triton_red_fused_sum_1.run (writes buf0)")]
    reduction, pointwise = failure.output_kernels
    assert pointwise.aten_ops == ["aten.mul.Tensor", "aten.relu.default"]
    assert pointwise.fx_nodes == ["mul", "relu"] and pointwise.fx_nodes_from == "output_code comments"
    assert reduction.aten_ops == ["aten.sum.default"]
    assert pointwise.excerpt.splitlines()[:2] == [
        "@triton.jit", "def triton_poi_fused_mul_relu_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):"]
    assert "tl.store(out_ptr0 + xoffset, tmp0)" in pointwise.excerpt and "import triton" not in pointwise.excerpt
    assert failure.kernel == "triton_red_fused_sum_1" and failure.phase == "runtime"
    assert failure.mismatched_output is None
    assert "localize put the failure in Inductor" in failure.how and "may be in Dynamo" not in failure.how

    # localize found the wrong values before Inductor: the kernels are named, and the layer with them.
    earlier = locate_failure(ASSERT_CLOSE_FAILURE, graphs, stamp, "case-x", stamp.name, 1, None, accuracy=True,
                             layer="AOTAutograd")
    assert earlier.output_kernels and "localize put the failure in AOTAutograd" in earlier.how
    # An error outside generated code after localize found only Inductor failing: Inductor is not cleared.
    elsewhere = locate_failure("Traceback (most recent call last):\n  File \"/home/u/r.py\", line 1, in <module>\n"
                               "RuntimeError: boom\n", graphs, stamp, "case-x", stamp.name, 1, None, layer="Inductor")
    assert "may be in Dynamo" not in elsewhere.how and "localize put the failure in Inductor" in elsewhere.how

    # One graph: the item the assertion names is that graph's output. After a graph break (two inference
    # graphs) it is not one graph's output of that index, so every output of each graph is listed.
    item = ASSERT_CLOSE_FAILURE + "\nThe failure occurred for item [0]\n"
    one = locate_failure(item, graphs, stamp, "case-x", stamp.name, 1, None, accuracy=True, layer="Inductor")
    assert one.mismatched_output == 0 and one.output_kernels[0].role.endswith("(the item the assertion names)")
    second = graph_dir.parent / "model__1_inference_1.1"
    second.mkdir()
    (second / "output_code.py").write_text(TRITON_OUTPUT_CODE)
    split = [load_graph(p, stamp, {}) for p in walk(stamp).graph_dirs]
    broken = locate_failure(item, split, stamp, "case-x", stamp.name, 1, None, accuracy=True, layer="Inductor")
    assert {k.graph for k in broken.output_kernels} == {"model__0_inference_0.0", "model__1_inference_1.1"}
    assert not any(k.role.endswith("(the item the assertion names)") for k in broken.output_kernels)
    assert "the outputs of graph" in broken.how


def test_a_lowering_failure_points_at_the_graph_left_without_output_code(tmp_path):
    from pt2_bug_basher.artifacts.graphs import load_graph
    from pt2_bug_basher.artifacts.index import walk
    from pt2_bug_basher.artifacts.locate import locate_failure

    stamp = tmp_path / "20260101-000000-fedcba"
    inductor = stamp / "torch_compile_debug" / "run_1-pid_1" / "torchinductor"
    done, failed = inductor / "model__0_forward_1.0", inductor / "model__0_backward_2.1"
    for graph_dir in (done, failed):
        graph_dir.mkdir(parents=True)
        graph_dir.joinpath("fx_graph_readable.py").write_text(TRITON_FX)
    done.joinpath("output_code.py").write_text(TRITON_OUTPUT_CODE)
    graphs = [load_graph(p, stamp, {}) for p in walk(stamp).graph_dirs]
    traceback = """Traceback (most recent call last):
  File "/home/u/repro.py", line 9, in <module>
    loss.backward()
  File "/venv/lib/python3.11/site-packages/torch/_inductor/compile_fx.py", line 1040, in _compile_fx_inner
    mb_compiled_graph = fx_codegen_and_compile(
  File "/venv/lib/python3.11/site-packages/torch/_inductor/lowering.py", line 500, in wrapped
    out = decomp_fn(*args, **kwargs)
torch._inductor.exc.InductorError: LoweringException: AssertionError: boom
  target: aten.neg.default
"""
    failure = locate_failure(traceback, graphs, stamp, "case-x", stamp.name, 1, None)
    assert failure.graph == "model__0_backward_2.1" and failure.kernel is None
    assert failure.phase == "compile" and "no output_code.py" in failure.how
    # Outside Inductor's per-graph compile (Dynamo, AOTAutograd) no graph is blamed.
    dynamo = traceback.replace("torch/_inductor/lowering.py", "torch/_functorch/_aot_autograd/x.py").replace(
        "_compile_fx_inner", "compile_fx").replace("InductorError: LoweringException", "Unsupported")
    assert locate_failure(dynamo, graphs, stamp, "case-x", stamp.name, 1, None).graph is None


def test_a_wrong_result_from_before_inductor_sends_to_the_graph_not_the_kernel():
    # the second user-agent journal: a decomposition bug's artifacts step asked to check each kernel line
    from pt2_bug_basher.artifacts.accuracy import OutputKernel
    from pt2_bug_basher.artifacts.collect import CollectArtifactsResult
    from pt2_bug_basher.artifacts.graphs import GraphSummary
    from pt2_bug_basher.artifacts.locate import FailureLocation
    from pt2_bug_basher.steps.artifacts import _accuracy_next_step

    graph = GraphSummary(name="model__0_inference_0.0", role="inference", dir_uri="case://c/artifacts/a/g/",
                         files=["fx_graph_transformed.py", "output_code.py"])
    result = CollectArtifactsResult(
        case_id="c", run_id="r", script="/w/repro.py", command=[], env_added={}, exit="exit 1", failed=True,
        duration_s=1.0, debug_dir="/w/d", index="case://c/artifacts/a/index.json", graph_count=1, graphs=[graph],
        kernel_count=1, files_total=2, files_by_kind={}, files=[], stdout="", stderr="", next_step="")
    kernel = OutputKernel(graph=graph.name, name="cpp_fused_hardsigmoid_mul_0", kind="cpp", role="writes output 0",
                          aten_ops=["aten.clamp_max"], call_line=40, line=33, output_code="case://c/artifacts/a/oc")
    failure = FailureLocation(accuracy=True, output_kernels=[kernel], how="")
    before = _accuracy_next_step(result, failure.model_copy(update={"localized": "decompositions"}), "next()",
                                 True, None)
    assert before.startswith("A wrong result, which localize put in decompositions, before Inductor")
    assert "fx_graph_transformed.py in case://c/artifacts/a/g/" in before and "check each line" not in before
    assert before.endswith("Then: next()")
    inductor = _accuracy_next_step(result, failure.model_copy(update={"localized": "Inductor"}), "next()", True, None)
    assert "check each line of the kernel" in inductor and "case://c/artifacts/a/oc line 33" in inductor


def test_a_long_kernels_excerpt_keeps_its_head_and_the_lines_up_to_the_focused_store():
    """A reduction's accumulator is initialised at the kernel's top and stored at its end: a bug in the initial
    value (a min's identity) must stay in the excerpt when the kernel is too long to show whole."""
    from pt2_bug_basher.analysis.output_code import Kernel

    loop = [f"            auto tmp{i} = in_ptr0[static_cast<int64_t>(x1 + 8L*x0)] + {i};" for i in range(60)]
    body = "\n".join([
        "cpp_fused_amin_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''",
        '#include "/tmp/torchinductor/pi/cpi.h"',
        'extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0)',
        "{",
        "    for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(4L); x0+=static_cast<int64_t>(1L))",
        "    {",
        "        float tmp_acc0 = std::numeric_limits<float>::max();",
        "        out_ptr0[static_cast<int64_t>(x0)] = tmp_acc0;",
        "        for(int64_t x1=static_cast<int64_t>(0L); x1<static_cast<int64_t>(8L); x1+=static_cast<int64_t>(1L))",
        "        {",
        *loop,
        "            tmp_acc0 = min_propagate_nan(tmp_acc0, tmp59);",
        "        }",
        "        out_ptr0[static_cast<int64_t>(x0)] = tmp_acc0;",
        "    }",
        "}",
        "''')",
    ])
    kernel = Kernel(name="cpp_fused_amin_0", kind="cpp", start=1, end=body.count("\n") + 1, body=body)
    excerpt = kernel.excerpt(1200, focus="out_ptr0")
    lines = excerpt.splitlines()
    assert len(excerpt) <= 1200 + 40  # the budget, and the line that says what was left out
    assert "float tmp_acc0 = std::numeric_limits<float>::max();" in excerpt  # the head: the initial value
    assert lines[-2].strip() == "out_ptr0[static_cast<int64_t>(x0)] = tmp_acc0;"  # the output's last store
    assert lines[-1] == "... (2 lines more)"
    assert any(line.startswith("... (") for line in lines) and "#include" not in excerpt
    assert lines[0].startswith('extern "C"') and lines[1] == "{"  # braces and indentation as generated


def test_kernel_origins_name_who_computed_the_stored_output_first():
    """Recorded origins matched against a kernel's code: the function that made an expression is named before the
    one that wrote its line out; short texts, numbers and other kernels' lines name nobody."""
    from pt2_bug_basher.artifacts.accuracy import MAX_ORIGINS, kernel_origins

    body = ("cpp_fused_0 = async_compile.cpp_pybinding(['float*'], r'''\n"
            "    for(int64_t x0=0; x0<8; x0+=1)\n"
            "    {\n"
            "        auto tmp0 = in_ptr0[x0];\n"
            "        auto tmp1 = tmp0 + decltype(tmp0)(1);\n"
            "        out_ptr0[x0] = tmp1;\n"
            "    }\n''')\n")
    cpp = "torch/_inductor/codegen/cpp.py"
    origins = {
        "wrote": {"for(int64_t x0=0; x0<8; x0+=1)": [[cpp, "CppKernel.codegen_loops", 10, 12, 1]],
                  "auto tmp1 = tmp0 + decltype(tmp0)(1);": [["torch/_inductor/codegen/common.py", "CSE.generate",
                                                              20, 25, 1]],
                  "out_ptr0[x0] = tmp1;": [[cpp, "CppKernel.store", 30, 31, 1]],
                  "never in this kernel": [[cpp, "Elsewhere.f", 40, 41, 1]]},
        "made": {"tmp0 + decltype(tmp0)(1)": [[cpp, "CppOverrides.relu", 50, 2]],
                 "1.0": [[cpp, "Number.f", 60, 1]], "x0": [[cpp, "Name.f", 70, 1]],
                 "(x0)": [[cpp, "Short.f", 80, 1]], "a\nb": [[cpp, "Lines.f", 90, 1]]},
    }
    found = kernel_origins(body, origins)
    # the lines that compute the stored output first (relu's, then its store), then the loop header
    assert [o.function for o in found] == ["CppOverrides.relu", "CSE.generate", "CppKernel.store",
                                           "CppKernel.codegen_loops"]
    relu = found[0]
    assert relu.made == 1 and relu.wrote == 0 and relu.line == 50 and relu.file == cpp
    assert relu.first == "auto tmp1 = tmp0 + decltype(tmp0)(1);"
    assert found[1].wrote == 1 and found[1].made == 0
    # among the computing lines, a helper behind many lines comes after one behind a single line
    origins["made"]["tmp0 + decltype"] = [[cpp, "Helper.many", 95, 1]]
    origins["wrote"]["auto tmp0 = in_ptr0[x0];"] = [[cpp, "Helper.many", 95, 96, 1]]
    assert [o.function for o in kernel_origins(body, origins)] == [
        "CppOverrides.relu", "CSE.generate", "CppKernel.store", "Helper.many", "CppKernel.codegen_loops"]
    many = {"wrote": {f"line {i}": [[cpp, f"F{i}.g", i, i, 1]] for i in range(30)}, "made": {}}
    assert len(kernel_origins("\n".join(f"line {i}" for i in range(30)), many)) == MAX_ORIGINS
