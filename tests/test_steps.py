"""The step functions called directly, without MCP: what the CLI and other front ends will call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pt2_bug_basher.analysis.verdict import tail_lines
from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import EnvironmentEvidence, ReproduceEvidence
from pt2_bug_basher.domain.names import Step
from pt2_bug_basher.execution.cpus import parallel_runs, usable_cpus, xdist_workers
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.execution.tlparse import compile_entries, read_compile_directory
from pt2_bug_basher.steps import classify, environment, reproduce

pytestmark = pytest.mark.anyio

BACKEND_FAILURE = """\
Traceback (most recent call last):
  File "/home/u/repro.py", line 9, in <module>
    fn(x)
torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:
LoweringException: AssertionError: unsupported layout
"""


@pytest.fixture
def state(config: ServerConfig) -> AppState:
    return AppState.open(config)


def open_case(state: AppState) -> str:
    """A case whose environment step is on record, without probing torch."""
    case = state.store.create_case(str(state.config.default_repo), sys.executable, {})
    state.store.add_evidence(case.case_id, Step.environment.value, True, "seeded",
                             data=EnvironmentEvidence(python=sys.executable))
    return case.case_id


async def test_classify_a_text_without_a_case(state: AppState) -> None:
    result = await classify.classify_error(state, text=BACKEND_FAILURE)
    assert result.category == "backend_compiler_failed"
    # without a case the diagnostic cannot run yet: the next step opens one and reproduces first
    assert not result.recorded and result.next_step.startswith("Open a case with check_env() ")
    assert 'run_with_logs(case_id="<case_id>", script="<repro.py>", repeat=2)' in result.next_step
    assert f"then run the diagnostic: {result.diagnostic} (<repro.py>: the script that fails this way" \
        in result.next_step
    with pytest.raises(InvalidInput, match="exactly one of text"):
        await classify.classify_error(state)
    # the default repository is no PyTorch checkout: the guide names upstream PyTorch's files, none "absent"
    repo = state.config.default_repo
    assert not (repo / "torch").exists()
    assert result.guide.source_files and result.guide.test_files and result.guide.not_present == []
    # in a PyTorch checkout, only the files it holds
    (repo / "torch" / "_inductor").mkdir(parents=True)
    (repo / "torch" / "__init__.py").write_text("")
    (repo / "torch" / "_inductor" / "lowering.py").write_text("")
    in_checkout = await classify.classify_error(state, text=BACKEND_FAILURE)
    assert in_checkout.guide.source_files == ["torch/_inductor/lowering.py"] and in_checkout.guide.test_files == []
    assert in_checkout.guide.not_present
    # a diagnostic that is a logged run, made before any reproduction, runs twice: it reproduces as well
    internal = await classify.classify_error(state, text="torch._dynamo.exc.InternalTorchDynamoError: KeyError: k\n")
    assert internal.category == "dynamo_internal"
    assert internal.diagnostic.startswith("run_with_logs(") and internal.diagnostic.endswith("repeat=2)")


async def test_a_pasted_traceback_names_its_environment_and_its_own_backend(
        state: AppState, this_venv: Path, tmp_path: Path) -> None:
    script = tmp_path / "refused.py"
    script.write_text("import torch\n\ndef refuse(gm, example_inputs):\n    raise RuntimeError('no graph')\n\n"
                      "torch.compile(lambda x: x.sin() + 1, backend=refuse)(torch.ones(3))\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "site-packages/torch/_dynamo" in run.stderr
    python = this_venv / "bin" / "python"
    here = await classify.classify_error(state, text=run.stderr)
    assert here.category == "backend_compiler_failed"
    # the script's own backend raised: said first, before the calls
    assert here.next_step.startswith(f"The exception is raised in the script's own backend refuse ({script}:4)")
    assert f"The traceback's torch is installed in the environment of {python}" in here.next_step
    assert f'check_env(python="{python}")' in here.next_step
    # nothing of PyTorch's compiler is suggested yet: the reproduction's verdict settles whose bug it is
    assert here.diagnostic == 'run_with_logs(case_id="<case_id>", script="<repro.py>", repeat=2)'
    assert "localize(" not in here.next_step and here.guide.source_files == [str(script)]
    # the same traceback from another machine: its environment is not here, nothing is named
    elsewhere = run.stderr.replace(str(this_venv), "/opt/elsewhere/venv")
    away = await classify.classify_error(state, text=elsewhere)
    assert away.category == "backend_compiler_failed" and "Open a case with check_env() " in away.next_step


async def test_reproduce_a_failing_script_records_the_reproduction(state: AppState) -> None:
    case_id = open_case(state)
    script = state.config.default_repo / "boom.py"
    # fails only with compilation on (as a compiler bug does): a failure with it off too is a user error
    script.write_text("import os\nif not os.environ.get('TORCHDYNAMO_DISABLE'):\n    raise ValueError('boom')\n")
    messages: list[str] = []

    async def progress(message: str) -> None:
        messages.append(message)

    result = await reproduce.run_with_logs(state, case_id, str(script), repeat=2, progress=progress)
    assert result.reproduced and result.recorded == ["reproduce"]
    assert [r.failed for r in result.runs] == [True, True]
    assert result.failure is not None and result.failure.exception_type == "ValueError"
    assert result.tail[-1] == "ValueError: boom"
    record = state.store.evidence(case_id, Step.reproduce.value)[-1]
    assert record.ok and record.payload(ReproduceEvidence).script == str(script)
    with pytest.raises(InvalidInput, match="does not exist or is not a file"):
        await reproduce.run_with_logs(state, case_id, str(script.with_name("missing.py")))


async def test_check_env_asks_through_the_callback_only_when_nothing_names_an_env(state, monkeypatch) -> None:
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "CONDA_EXE"):
        monkeypatch.delenv(name, raising=False)
    asked: list[bool] = []

    async def ask() -> environment.EnvironmentChoice:
        asked.append(True)
        return environment.EnvironmentChoice(python=sys.executable)

    result = await environment.check_env(state, ask=ask)
    assert asked == [True] and result.ok and result.rule == "explicit python argument"
    assert result.case_id and result.next_step.startswith("Reproduce the failure twice")
    assert not environment.needs_asking(None, sys.executable)


def test_tail_drops_dynamo_hints_and_keeps_the_error() -> None:
    text = BACKEND_FAILURE + "\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace\n\n" + "-" * 20 + "\n"
    assert tail_lines(text)[-1] == "LoweringException: AssertionError: unsupported layout"
    assert not any("TORCHDYNAMO_VERBOSE" in line for line in tail_lines(text))


def test_one_reader_of_tlparse_compile_directory(tmp_path: Path) -> None:
    path = tmp_path / "compile_directory.json"
    path.write_text(json.dumps({
        "[-/-]": {"artifacts": [{"name": "chromium_events.json", "url": "x"}]},
        "[0/0]": {"artifacts": [{"name": "dynamo_output_graph_0.txt", "url": "-_0_0_0/dynamo_output_graph_0.txt"},
                                {"name": "inductor_error_1.txt", "url": "e"}, "not an artifact"]},
        "[1/0]": {"artifacts": [{"name": "dynamo_graph_break_reason_2.txt", "url": "b"}]},
        "[2/0]": "malformed",
    }))
    compiles = read_compile_directory(path)
    assert list(compiles) == ["[0/0]", "[1/0]"] and len(compiles["[0/0]"]) == 2
    assert [(e.compile_id, e.status) for e in compile_entries(compiles)] == [("[0/0]", "failed"),
                                                                              ("[1/0]", "graph break")]
    assert read_compile_directory(tmp_path / "missing.json") == {}


def test_cpu_counts() -> None:
    assert usable_cpus() >= 1
    assert parallel_runs(1) == 1 and parallel_runs(1000) == usable_cpus()
    assert 2 <= xdist_workers() <= 4


async def test_a_triton_kernel_the_script_launched_itself_is_not_sent_to_inductor(state: AppState) -> None:
    from corpus_samples import LOCAL_GPU, TRAINING

    own = next(d["text"] for d in TRAINING if d["id"] == "tu10b-tr-03")  # a user kernel's autotune config
    result = await classify.classify_error(state, text=own)
    assert result.category == "triton" and result.exception_type == "triton.runtime.autotuner.OutOfResources"
    assert result.next_step.startswith("No frame of torch in the traceback")
    assert result.diagnostic == 'run_with_logs(case_id="<case_id>", script="<repro.py>", repeat=2)'
    assert result.guide.source_files == [] and result.guide.log_preset is None and result.phase is None
    # a kernel Inductor generated (torch's frames launch it) keeps the Triton playbook; one launched in eager is
    # the script's again
    for sample_id in ("gpu-tr_user_kernel_eager_compile_error", "gpu-tr_out_of_resources"):
        eager = next(d["text"] for d in LOCAL_GPU if d["id"] == sample_id)
        assert (await classify.classify_error(state, text=eager)).next_step.startswith("No frame of torch")
    generated = next(d["text"] for d in LOCAL_GPU if d["id"] == "gpu-tr_inductor_injected_compile_error")
    inductor = await classify.classify_error(state, text=generated)
    assert inductor.category == "triton" and not inductor.next_step.startswith("No frame of torch")
