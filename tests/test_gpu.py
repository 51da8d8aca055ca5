"""The GPU categories for real: Triton kernel errors and CUDA runtime crashes. Skipped without CUDA.

Run on a CUDA machine with: python -m pytest -m gpu tests/test_gpu.py
"""

from __future__ import annotations

import json
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


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.anyio,
    pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def gpu_config(tmp_path_factory) -> ServerConfig:
    root = tmp_path_factory.mktemp("gpu")
    shutil.copytree(EXAMPLES / "gpu", root / "repo" / "gpu")
    return ServerConfig(state_dir=root / "state", default_repo=root / "repo", allowed_roots=(root,))


@pytest.fixture(scope="module")
def gpu_case(gpu_config) -> str:
    result = anyio.run(lambda: start_case(Store(gpu_config.state_dir), gpu_config.default_repo, python=sys.executable))
    assert result.ok
    return result.case_id


def script(config: ServerConfig, name: str) -> str:
    return str(config.default_repo / "gpu" / name)


async def call(config, tool, **arguments):
    async with Client(create_server(config)) as client:
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def test_check_env_reports_the_gpu(gpu_config):
    import torch

    data = await call(gpu_config, "check_env", python=sys.executable)
    info = data["torch"]
    assert info["cuda_available"] and info["cuda_version"] == torch.version.cuda
    gpu = info["gpus"][0]
    major, minor = torch.cuda.get_device_capability(0)
    assert gpu["name"] == torch.cuda.get_device_name(0) and gpu["capability"] == f"{major}.{minor}"
    import triton

    assert info["triton_version"] == triton.__version__


async def waive_the_test_steps(config: ServerConfig, case_id: str) -> None:
    for step in ("test", "main_check"):
        await call(config, "waive_step", case_id=case_id, step=step,
                   reason="GPU artifact test: no unit test for the injected bug")


@pytest.mark.parametrize("name,categories", [
    ("triton_compile_error.py", {"triton"}),
    ("triton_device_assert.py", {"runtime_crash"}),
    ("triton_accuracy.py", {"accuracy"}),
    # the user's own kernel faults with compilation off too: the oracle says so, the compiler is not at fault
    ("triton_out_of_bounds.py", {"user_error"}),
])
async def test_gpu_failures_reproduce_with_the_right_category(gpu_config, gpu_case, name, categories):
    data = await call(gpu_config, "run_with_logs", case_id=gpu_case, script=script(gpu_config, name), repeat=2)
    assert data["reproduced"], data["runs"]
    assert data["failure"]["category"] in categories, data["failure"]
    assert data["runs"][0]["signature"] == data["runs"][1]["signature"]
    if name == "triton_compile_error.py":
        assert "backend_compiler_failed" in data["failure"]["secondary"]
    if name == "triton_out_of_bounds.py":
        # The store lands outside any mapping: CUDA reports an illegal address or an unsupported operation.
        assert "CUDA error" in " ".join(data["tail"] + data["failure"]["evidence"]), data["tail"]
        assert data["verdict"]["compiler_at_fault"] is False, data["verdict"]
        assert "not a compiler bug" in data["next_step"], data["next_step"]


async def test_launch_blocking_pins_the_async_crash_to_the_kernel(gpu_config, gpu_case):
    path = script(gpu_config, "triton_device_assert.py")
    plain = await call(gpu_config, "run_with_logs", case_id=gpu_case, script=path, repeat=1)
    pinned = await call(gpu_config, "run_with_logs", case_id=gpu_case, script=path, repeat=1, logs="runtime_crash")
    assert pinned["env_added"]["CUDA_LAUNCH_BLOCKING"] == "1"
    assert pinned["inductor_config"] == {"triton.debug_sync_kernel": True}
    store = Store(gpu_config.state_dir)
    plain_err = Path(store.get_run(plain["runs"][0]["run_id"]).stderr_path).read_text()
    pinned_err = Path(store.get_run(pinned["runs"][0]["run_id"]).stderr_path).read_text()
    from pt2_bug_basher.analysis.failure import parse_failure

    # The Python traceback printed before any abort at exit: where the error was raised.
    def raised_at(text: str):
        text = text.split("terminate called after throwing", 1)[0]
        record = parse_failure(text)
        return (record.torch_frame, record.user_frame, record.exception_type) if record else (None, None, None)

    plain_torch, _, _ = raised_at(plain_err)
    pinned_torch, pinned_user, pinned_type = raised_at(pinned_err)
    generated = [line for line in pinned_err.splitlines() if "in call" in line or "triton_poi_" in line]
    report = json.dumps({"plain_torch_frame": str(plain_torch), "pinned_torch_frame": str(pinned_torch),
                         "pinned_user_frame": str(pinned_user), "pinned_type": pinned_type,
                         "generated_lines": generated[:8]}, indent=1)
    print(report)
    # Without it, CUDA says the stack may be wrong and the error surfaces at a synchronisation;
    # with it, the traceback runs through the generated code's `call`, at the kernel launch.
    assert "might be asynchronously reported" in plain_err
    assert plain_torch is not None and plain_torch.function == "synchronize", report
    assert pinned_torch is not None and "triton" in pinned_torch.file and pinned_torch.function == "run", report
    assert any("Failed during launch triton_" in line for line in generated), report
    assert any(line.strip().startswith("triton_") and ".run(" in line for line in generated), report


async def test_artifacts_list_triton_kernels_and_name_the_failing_one(gpu_config, gpu_case):
    await waive_the_test_steps(gpu_config, gpu_case)
    data = await call(gpu_config, "collect_debug_artifacts", case_id=gpu_case,
                      script=script(gpu_config, "triton_compile_error.py"))
    kernels = [k["name"] for g in data["graphs"] for k in g["kernels"]]
    assert data["kernel_count"] >= 1 and any(k.startswith("triton_") for k in kernels), kernels
    assert data["failure"] is not None and data["failure"]["kernel"] in kernels, data["failure"]


async def test_a_wrong_triton_result_names_its_kernel_and_the_override_that_made_the_bad_line(gpu_config, gpu_case):
    await waive_the_test_steps(gpu_config, gpu_case)
    data = await call(gpu_config, "collect_debug_artifacts", case_id=gpu_case,
                      script=script(gpu_config, "triton_accuracy.py"))
    failure = data["failure"]
    assert failure is not None and failure["accuracy"], failure
    [kernel] = failure["output_kernels"]
    assert kernel["kind"].startswith("triton") and kernel["name"].startswith("triton_"), kernel
    # TritonOverrides.relu returned `x + 1` (the injected bug): it is named with the kernel line that holds it.
    relu = [o for o in kernel["origins"] if o["function"].endswith("Overrides.relu")]
    assert relu and all(o["file"] == "torch/_inductor/codegen/triton.py" and o["made"] >= 1 for o in relu), \
        kernel["origins"]
    assert all("+ 1" in o["first"] for o in relu), relu
    assert any(o["wrote"] and "tl.store(" in o["first"] for o in kernel["origins"]), kernel["origins"]


@pytest.mark.slow
@pytest.mark.timeout(570)
async def test_fx_minifier_on_the_triton_failure(gpu_config, gpu_case):
    # Forked trials of a CUDA graph drifted here once (7 -> 2 nodes, the result passed alone): the
    # trials must run in fresh processes, and the result must fail the case's way when run alone.
    await call(gpu_config, "run_with_logs", case_id=gpu_case, script=script(gpu_config, "triton_compile_error.py"),
               repeat=2)
    data = await call(gpu_config, "minify", case_id=gpu_case, mode="fx", after="aot", budget_s=420,
                      script=script(gpu_config, "triton_compile_error.py"))
    report = json.dumps(data, indent=1)[:6000]
    assert data["confirmed"], report
    assert data["after"]["nodes"] < data["before"]["nodes"], report
    assert any("fresh processes" in line for line in data["fx"]["minifier_log"]), report
    minimized = Path(data["minimized_path"]).read_text()
    assert "aten.relu" in minimized and "cuda" in minimized, minimized[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(480)
async def test_source_reducer_on_the_triton_failure(gpu_config, gpu_case):
    await call(gpu_config, "run_with_logs", case_id=gpu_case, script=script(gpu_config, "triton_compile_error.py"),
               repeat=2)
    data = await call(gpu_config, "minify", case_id=gpu_case, mode="source", budget_s=300,
                      script=script(gpu_config, "triton_compile_error.py"))
    report = json.dumps(data, indent=1)[:6000]
    print(report)
    assert data["confirmed"] and data["helped"], report
    assert data["after"]["bytes"] < data["before"]["bytes"], report
    assert "fresh processes" in data["source"]["evaluator"], report
    reduced = Path(data["minimized_path"]).read_text()
    assert "inject_relu_bug_TESTING_ONLY" in reduced and "cuda" in reduced, reduced


# -- one Triton code-generation mutant of the benchmark, end to end: localize in a develop checkout ------

MUTANTS = Path(__file__).resolve().parents[1] / "bench" / "mutants"
TRITON_MUTANT = "gpu-1b814b6640"  # TritonKernel.iteration_ranges_get_pid: `is not` made `is`, a crash


def _mutant(mutant_id: str) -> dict:
    for line in (MUTANTS / "manifest.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["id"] == mutant_id:
            return entry
    raise LookupError(mutant_id)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_localize_names_the_mutated_triton_codegen_function(tmp_path_factory):
    import torch
    from planted_bugs import PlantedBug, plant
    from torch_checkout import build_clean_checkout, make_checkout_python

    mutant = _mutant(TRITON_MUTANT)
    if torch.__version__.split("+")[0] != mutant["torch"]:
        pytest.skip(f"the mutant edits torch {mutant['torch']}'s sources")
    root = tmp_path_factory.mktemp("gpu-mutant")
    checkout, _ = build_clean_checkout(root)
    python = make_checkout_python(root, checkout)
    repro = (MUTANTS.parents[1] / mutant["kill_program"]).read_text()
    plant(checkout, PlantedBug(name=mutant["id"], file=mutant["file"], old=mutant["original"], new=mutant["mutated"],
                               repro=repro, layer="gpu", guilty=mutant["function"], what=mutant["operator"]))
    script_path = root / "repro.py"
    script_path.write_text(repro)
    config = ServerConfig(state_dir=root / "state", default_repo=checkout, allowed_roots=(root,))
    env = await call(config, "check_env", python=str(python), repo=str(checkout))
    case_id = env["case_id"]
    run = await call(config, "run_with_logs", case_id=case_id, script=str(script_path), repeat=2)
    assert run["reproduced"], run["runs"]
    data = await call(config, "localize", case_id=case_id)
    assert data["layer"] == "Inductor", data["layer"]
    first, last = mutant["function_lines"]
    ranks = [i for i, s in enumerate(data["suspects"], 1)
             if s["file"] == mutant["file"] and s["line"] is not None and first <= s["line"] <= last]
    report = json.dumps(data["suspects"][:5], indent=1)
    assert ranks and ranks[0] <= 3, report
