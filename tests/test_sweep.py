"""The regression sweep: the engine on real interpreters, and run_tests' sweep on a develop-build torch checkout.

The checkout's main carries two real bugs in AOTAutograd-time decompositions (hardsigmoid clamps at 5, the
leaky_relu reference doubles its slope); the fix branch repairs hardsigmoid and, in the first version of
the fix, breaks hardswish. The case's backend is aot_eager_decomp_partition, which applies those
decompositions without Inductor's code generation, so each sample compiles in about a second.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from planted_bugs import PLANTED, PlantedBug, plant, unplant
from torch_checkout import TorchCheckout, build_torch_checkout, git

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.execution.sweep import (
    ProgramSpec,
    SampleKey,
    SampleResult,
    SweepRun,
    SweepSpec,
    Target,
    compare,
    plain_launcher,
    run_sweep,
)
from pt2_bug_basher.execution.sweep.plan import CaseSweepInputs, case_spec, ops_in_graph_text, ops_in_source
from pt2_bug_basher.mcp_server.server import create_server

BACKEND = "aot_eager_decomp_partition"
REPRO = f'''\
import torch
import torch.nn.functional as F


def f(x):
    return F.hardsigmoid(F.hardswish(F.leaky_relu(x)))


x = torch.linspace(-4, 4, 32)
torch.testing.assert_close(torch.compile(f, backend="{BACKEND}")(x), f(x))
'''
TEST_FILE = "test/test_activations.py"
TEST_NAME = "TestActivations.test_hardsigmoid_decomposed"
TEST_SOURCE = f'''\
import torch
import torch.nn.functional as F
from torch.testing._internal.common_utils import TestCase, run_tests


class TestActivations(TestCase):
    def test_hardsigmoid_decomposed(self):
        x = torch.linspace(-4, 4, 32)
        self.assertEqual(torch.compile(F.hardsigmoid, backend="{BACKEND}")(x), F.hardsigmoid(x))


if __name__ == "__main__":
    run_tests()
'''


def _bug(name: str, file: str, old: str, new: str) -> PlantedBug:
    return PlantedBug(name=name, file=file, old=old, new=new, repro=REPRO, layer="decompositions", guilty=name,
                      what=name)


LEAKY_RELU = _bug("leaky_relu", "torch/_refs/nn/functional/__init__.py",
                  "    return torch.where(torch.gt(a, 0), a, torch.mul(a, negative_slope))\n",
                  "    return torch.where(torch.gt(a, 0), a, torch.mul(a, negative_slope * 2))\n")
HARDSWISH = _bug("hardswish", "torch/_decomp/decompositions.py",
                 "    return self * torch.clamp(torch.clamp(self + 3, min=0), max=6) / 6\n",
                 "    return self * torch.clamp(torch.clamp(self + 3, min=0), max=5) / 6\n")


# -- the plan: ops and patterns from the case's text -------------------------------------------------

def test_ops_come_from_the_compiled_functions_and_graphs():
    assert ops_in_source(REPRO) == ["hardsigmoid", "hardswish", "leaky_relu"]
    # module-level calls build inputs; x += 1 is an in-place add
    assert ops_in_source("import torch\ndef f(x):\n    x += 1\n    return x.amin(1)\nx = torch.randn(3)\n") == \
        ["add_", "amin"]
    assert ops_in_graph_text("mul = torch.ops.aten.mul.Tensor(a, b)\naten.add_.Tensor(x, 1)") == ["mul", "add_"]
    spec, why = case_spec(CaseSweepInputs(sources=[REPRO], graph_texts=["torch.ops.aten.hardswish.default(x)"]))
    assert [o.op for o in spec.ops] == ["hardswish", "hardsigmoid", "leaky_relu"] and spec.backends == [BACKEND]
    assert not spec.programs and spec.dynamic == [False]
    inplace, _ = case_spec(CaseSweepInputs(sources=["def f(x):\n    x.mul_(2)\n    return x\n"], layer="AOTAutograd",
                                           first_failing="aot_eager"))
    assert inplace.ops[0].op == "mul" and inplace.ops[0].inplace and inplace.backends == ["aot_eager"]
    assert inplace.programs and all("aot_eager" in p.code for p in inplace.programs)
    dynamic, _ = case_spec(CaseSweepInputs(sources=[REPRO], layer="dynamic shapes"))
    assert dynamic.dynamic == [False, True]


def test_compare_sorts_regressions_fixes_and_pre_existing():
    def run(label: str, outcomes: dict[str, str]) -> SweepRun:
        return SweepRun(target=label, results=[SampleResult(key=SampleKey(kind="program", name=n), outcome=o)
                                               for n, o in outcomes.items()])

    fix = run("fix", {"a": "fail", "b": "pass", "c": "error", "d": "pass", "e": "skip", "f": "timeout"})
    main = run("main", {"a": "pass", "b": "fail", "c": "fail", "d": "pass", "e": "fail", "f": "not_run"})
    got = compare(fix, main)
    assert [r.key.name for r in got.regressions] == ["a"]
    assert [r.key.name for r in got.also_fixed] == ["b"]
    assert [r.key.name for r in got.pre_existing] == ["c"]
    assert got.compared == 4  # e was skipped on one side, f not run on the other


# -- the engine, on this interpreter -------------------------------------------------------------------

PASSING = ("import torch\nx = torch.ones(3)\n"
           "torch.testing.assert_close(torch.compile(lambda t: t * 2, backend='eager')(x), x * 2)\n")
WRONG = "import torch\nassert torch.ones(2).sum().item() == 3, 'two, not three'\n"
BROKEN = "import torch\nraise RuntimeError('the program itself broke')\n"


@pytest.mark.anyio
async def test_engine_runs_programs_in_shards_with_rerun_commands(tmp_path: Path):
    spec = SweepSpec(programs=[ProgramSpec(name="passing", code=PASSING), ProgramSpec(name="wrong", code=WRONG),
                               ProgramSpec(name="broken", code=BROKEN)])
    target = Target("here", sys.executable, tmp_path)
    messages: list[str] = []

    async def progress(message: str) -> None:
        messages.append(message)

    run = await run_sweep(spec, target, scratch_dir=tmp_path / "s", launch=plain_launcher(tmp_path), shards=2,
                          progress=progress)
    outcomes = {r.key.name: r.outcome for r in run.results}
    assert outcomes == {"passing": "pass", "wrong": "fail", "broken": "error"}, run
    assert run.shards == 2 and not run.problems
    wrong = next(r for r in run.results if r.key.name == "wrong")
    assert "two, not three" in wrong.message
    again = subprocess.run(wrong.rerun, shell=True, capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and '"outcome": "fail"' in again.stdout, again

    # No time left: nothing starts, and every sample says so.
    late = await run_sweep(spec, target, scratch_dir=tmp_path / "late", launch=plain_launcher(tmp_path), shards=1,
                           budget_s=0)
    assert {r.outcome for r in late.results} == {"not_run"} and len(late.results) == 3


# -- run_tests' sweep on a torch checkout -------------------------------------------------------------

@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> TorchCheckout:
    made = build_torch_checkout(tmp_path_factory.mktemp("sweep"))
    root = made.checkout
    git(root, "checkout", "-q", "-f", "main")
    git(root, "reset", "-q", "--hard", "clean")
    plant(root, PLANTED["decomposition"])
    plant(root, LEAKY_RELU)
    git(root, "branch", "-q", "-D", "fix")
    git(root, "checkout", "-q", "-b", "fix")
    (root / "repro_activations.py").write_text(REPRO)
    (root / TEST_FILE).write_text(TEST_SOURCE)
    return made


async def ok(client: Client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, (tool, result.content[0].text if result.content else result)
    return result.structured_content


def ops_of(records: list[dict]) -> set[str]:
    return {r["sample"].split(" ")[0] for r in records}


@pytest.mark.anyio
@pytest.mark.timeout(1500)  # five interpreters a side, each importing torch and op_db, on two shared cores
async def test_sweep_finds_the_regression_the_repair_and_the_pre_existing_failure(checkout: TorchCheckout):
    root = checkout.checkout
    server = create_server(ServerConfig.from_options(repo=root))
    async with Client(server) as client:
        env = await ok(client, "check_env", python=str(checkout.python), repo=str(root))
        case = {"case_id": env["case_id"]}
        assert (await ok(client, "run_with_logs", **case, script="repro_activations.py", repeat=2))["reproduced"]
        await ok(client, "waive_step", **case, step="reduce", reason="the repro is four lines long")
        await ok(client, "register_test", **case, test_file=TEST_FILE, test_name=TEST_NAME)
        assert (await ok(client, "make_worktree", **case, action="create", ref="main"))["outcome"] == "failed"

        # The fix repairs hardsigmoid and breaks hardswish.
        unplant(root, PLANTED["decomposition"])
        plant(root, HARDSWISH, commit=False)
        first = await ok(client, "run_tests", **case, sweep=True)
        assert first["registered"].endswith(": passed"), first
        sweep = first["sweep"]
        assert sweep["compared_with_main"] and sweep["backend"] == BACKEND, sweep
        assert set(sweep["ops"]) == {f"nn.functional.{op}" for op in ("hardsigmoid", "hardswish", "leaky_relu")}
        assert sweep["regression_count"] > 0 and ops_of(sweep["regressions"]) == {"nn.functional.hardswish"}
        assert sweep["also_fixed_count"] > 0 and ops_of(sweep["also_fixed"]) == {"nn.functional.hardsigmoid"}
        assert sweep["pre_existing_count"] > 0 and ops_of(sweep["pre_existing"]) == {"nn.functional.leaky_relu"}
        assert first["verified"] is False and "regression sweep" in first["verification"], first
        regression = sweep["regressions"][0]
        assert regression["rerun"] in first["next_step"] and "run_tests(" in first["next_step"]
        assert regression["main_outcome"] == "pass"

        # Each sample reruns alone, on each side, as its command says.
        on_fix = subprocess.run(regression["rerun"], shell=True, capture_output=True, text=True, timeout=300)
        assert on_fix.returncode == 1 and '"outcome": "fail"' in on_fix.stdout, on_fix
        on_main = subprocess.run(regression["main_rerun"], shell=True, capture_output=True, text=True, timeout=300)
        assert on_main.returncode == 0 and '"outcome": "pass"' in on_main.stdout, on_main

        # The full table is a resource: every sample, both sides.
        table = json.loads((await client.read_resource(sweep["table"])).contents[0].text)
        rows = table["rows"]
        assert len(rows) >= sweep["samples"] and all(r["main"] is not None for r in rows)
        assert sum(r["fix"] in ("fail", "error") and r["main"] == "pass" for r in rows) == sweep["regression_count"]

        # The fix without the regression: verified; leaky_relu still fails on both sides and blocks nothing.
        unplant(root, HARDSWISH)
        second = await ok(client, "run_tests", **case, sweep=True)
        assert second["verified"] is True, second
        sweep = second["sweep"]
        assert sweep["regression_count"] == 0 and sweep["also_fixed_count"] > 0 and sweep["pre_existing_count"] > 0
        assert "0 regressions" in second["verification"]
        review = await ok(client, "review_changes", **case)
        assert review["sweep"].startswith(f"{sweep['samples']} samples of {len(sweep['ops'])} ops swept")
        assert f"0 regressions, {sweep['also_fixed_count']} also fixed" in review["sweep"]
        assert "does not reach the bug" not in review["sweep"]  # hardsigmoid's samples tell main from the fix


def test_a_sweep_that_tells_no_sample_apart_says_it_does_not_reach_the_bug():
    from pt2_bug_basher.domain.evidence import SweepEvidence

    blind = SweepEvidence(ops=["add"], backend="aot_eager", samples=46, compared_with_main=True)
    assert not blind.tells_apart and "does not reach the bug" in blind.line()
    assert blind.line().startswith("46 samples of 1 ops swept (aot_eager), 0 regressions, 0 also fixed")
    for counts in ({"regression_count": 1}, {"also_fixed_count": 2}):
        seen = blind.model_copy(update=counts)
        assert seen.tells_apart and "does not reach the bug" not in seen.line()
    alone = blind.model_copy(update={"compared_with_main": False})
    assert not alone.tells_apart and alone.line().endswith("main not swept")
    assert "does not reach" not in blind.model_copy(update={"samples": 0}).line()


def test_a_sample_whose_arguments_hold_no_tensor_compares_by_equality():
    """arange's and full's samples carry sizes, dtypes and devices: those are compared by equality, not reported
    as failures of the comparison itself."""
    from pt2_bug_basher.execution.sweep import PROBE

    for op in ("arange", "full"):
        done = subprocess.run([sys.executable, str(PROBE), "--op", op, "--sample", "0", "--backend", "eager"],
                              capture_output=True, text=True, timeout=300)
        [line] = [x for x in done.stdout.splitlines() if x.startswith("PT2BB-SWEEP:")]
        assert json.loads(line.split(" ", 1)[1])["outcome"] == "pass", (op, done.stderr[-2000:])


def test_an_export_case_sweeps_through_export_and_its_programs_run(tmp_path: Path):
    """localize's export layer: samples and pattern programs go through torch.export and run_decompositions, the
    path the case's bug lies on, not torch.compile; on a sound torch an input mutation comes back."""
    from pt2_bug_basher.execution.sweep import PROBE

    source = "class M(torch.nn.Module):\n    def forward(self, x, w):\n        x.mul_(w)\n        return x.sum()\n"
    spec, why = case_spec(CaseSweepInputs(sources=[source], layer="export"))
    assert spec.backends == ["export"] and any("run_decompositions" in line for line in why)
    assert spec.programs and all("exported(f)" in p.code and "torch.compile" not in p.code for p in spec.programs)
    program = next(p for p in spec.programs if p.name == "input_add_-nograd-export")
    path = tmp_path / "input_add.py"
    path.write_text(program.code)
    subprocess.run([sys.executable, str(path)], check=True, capture_output=True, timeout=300)
    # the mutation dropped: the comparison the program makes fails
    path.write_text(program.code.replace("run_decompositions().module()(x)", "module()(x.clone())"))
    assert subprocess.run([sys.executable, str(path)], capture_output=True, timeout=300).returncode != 0
    done = subprocess.run([sys.executable, str(PROBE), "--op", "mul", "--sample", "0", "--backend", "export"],
                          capture_output=True, text=True, timeout=300)
    [line] = [x for x in done.stdout.splitlines() if x.startswith("PT2BB-SWEEP:")]
    assert json.loads(line.split(" ", 1)[1])["outcome"] == "pass", done.stderr[-2000:]


def test_a_dynamo_case_that_mutates_a_dict_sweeps_programs_that_reach_its_replay(tmp_path: Path):
    """A Dynamo case whose repro pops from a dict gets the side-effect programs: the caller's dict and list,
    mutated inside the compiled function and compared after it; they pass on a sound torch and fail on one
    whose dict.pop is not written back."""
    from planted_bugs import plant_dict_pop_bug
    from torch_checkout import build_clean_checkout, make_checkout_python

    source = "def step(x, state):\n    s = state.pop('scale')\n    return x * s\n"
    spec, why = case_spec(CaseSweepInputs(sources=[source], layer="Dynamo", first_failing="eager"))
    assert any(line.startswith("Dynamo patterns:") and "side_effects" in line for line in why), why
    program = next(p for p in spec.programs if p.name == "dict_pop_only-nograd-eager")
    path = tmp_path / "dict_pop_only.py"
    path.write_text(program.code)
    subprocess.run([sys.executable, str(path)], check=True, capture_output=True, timeout=300)
    checkout, _ = build_clean_checkout(tmp_path / "bug")
    plant_dict_pop_bug(checkout)
    buggy = make_checkout_python(tmp_path / "bug", checkout)
    failed = subprocess.run([str(buggy), str(path)], capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0 and "scale" in failed.stderr, failed.stderr[-2000:]
    export_spec, _ = case_spec(CaseSweepInputs(sources=[source], layer="export"))
    assert not any(p.name.startswith("dict_pop") for p in export_spec.programs)
