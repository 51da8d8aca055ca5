"""The mutation benchmark (bench/mutants): site selection, the kill driver, the manifest's integrity."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

MUTANTS = Path(__file__).resolve().parents[1] / "bench" / "mutants"
sys.path.insert(0, str(MUTANTS))

from cosmic_ray.mutating import mutate_code  # noqa: E402
from generate import MANIFEST, Generator, mode_of, split_of  # noqa: E402
from operators import operator  # noqa: E402
from score import bisector_layer, rank, summary  # noqa: E402
from sites import Site, edit_of, function_spans, innermost, layer_of, mutate, sites_in  # noqa: E402

TINY = '''\
LIMIT = 3


class Box:
    def grow(self, n):
        total = 0
        for i in range(n):
            total += i * 2
        if total > LIMIT:
            self.log.append(total)
        return total


def helper(flag):
    return not flag
'''


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    (tmp_path / "torch" / "_inductor").mkdir(parents=True)
    (tmp_path / "torch" / "_inductor" / "tiny.py").write_text(TINY)
    return tmp_path


def test_sites_only_on_covered_function_lines(tiny: Path):
    rel = "torch/_inductor/tiny.py"
    sites = sites_in(tiny, rel, {1, 8, 9})  # line 1 is module level
    assert sites and {s.line for s in sites} == {8, 9}
    assert {s.function for s in sites} == {"Box.grow"}
    assert {"ReplaceComparisonOperator_Gt_GtE", "DeleteStatement", "ReplaceBinaryOperator_Mul_Add"} <= \
        {s.operator for s in sites}
    assert all(s.span == (5, 11) and s.id.startswith("inductor-") for s in sites)


def test_each_site_is_a_one_occurrence_edit_that_matches_cosmic_ray(tiny: Path):
    rel = "torch/_inductor/tiny.py"
    for site in sites_in(tiny, rel, set(range(1, 20))):
        edit = mutate(tiny, site)
        assert edit is not None, site
        old, new = edit
        assert TINY.count(old) == 1 and old != new
        expected = mutate_code(TINY, operator(site.operator), site.occurrence)
        assert TINY.replace(old, new, 1) == expected
        first, last = site.span
        assert first <= site.line <= last


def test_our_operators_return_and_delete():
    assert mutate_code("def f():\n    return 1\n", operator("ReplaceReturnValue"), 0) == \
        "def f():\n    return None\n"
    assert mutate_code("def f(x):\n    x.append(1)\n    x += 2\n", operator("DeleteStatement"), 1) == \
        "def f(x):\n    x.append(1)\n    pass\n"
    assert mutate_code("def f():\n    return None\n", operator("ReplaceReturnValue"), 0) is None


def test_edit_widens_until_unique():
    source = "a = 1\nb = 2\na = 1\nc = 3\n"
    mutated = "a = 1\nb = 2\na = 2\nc = 3\n"
    old, new = edit_of(source, mutated)
    assert source.count(old) == 1 and source.replace(old, new, 1) == mutated


def test_drive_tells_pass_wrong_and_crash(tmp_path: Path):
    (tmp_path / "ok.py").write_text(
        "import torch\nassert torch.compile(lambda x: x + 1, backend='eager')(torch.ones(1)) == 2\n")
    (tmp_path / "wrong.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "boom.py").write_text("raise KeyError('nope')\n")
    programs = [str(tmp_path / n) for n in ("ok.py", "wrong.py", "boom.py")]
    out = subprocess.run([sys.executable, str(MUTANTS / "drive.py"), "--all", *programs], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    results = [json.loads(line) for line in out.splitlines()]
    assert [r["outcome"] for r in results] == ["pass", "wrong", "crash"]
    assert "KeyError" in results[2]["error"] and "boom.py" in results[2]["traceback"]
    out = subprocess.run([sys.executable, str(MUTANTS / "drive.py"), *programs[1:]], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert [json.loads(line)["outcome"] for line in out.splitlines()] == ["wrong"]  # stops at the first


def test_kill_programs_run_on_the_sweep_engine_and_tell_pass_wrong_and_crash(tmp_path: Path):
    from runner import run_programs

    (tmp_path / "ok.py").write_text(
        "import torch\nassert torch.compile(lambda x: x + 1, backend='eager')(torch.ones(1)) == 2\n")
    (tmp_path / "wrong.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "boom.py").write_text("def inner():\n    raise KeyError('nope')\n\n\ninner()\n")
    (tmp_path / "segv.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    programs = [str(tmp_path / n) for n in ("ok.py", "wrong.py", "boom.py", "segv.py")]
    results, timed_out = run_programs(Path(sys.executable), programs, tmp_path / "work", timeout_s=240)
    assert not timed_out
    assert [(Path(r["program"]).name, r["outcome"]) for r in results] == [
        ("ok.py", "pass"), ("wrong.py", "wrong"), ("boom.py", "crash"), ("segv.py", "crash")], results
    boom = results[2]
    assert "KeyError" in boom["error"] and boom["frames"][-1].endswith("program_boom.py:2"), boom
    assert "SIGSEGV" in results[3]["error"] or "signal" in results[3]["error"], results[3]


def test_rank_finds_the_mutated_function():
    mutant = {"file": "torch/_inductor/tiny.py", "function": "Box.grow", "function_lines": [5, 11]}
    suspects = [{"file": "torch/_inductor/other.py", "line": 7, "function": "grow"},
                {"file": "torch/_inductor/tiny.py", "line": 20, "function": "helper"},
                {"file": "torch/_inductor/tiny.py", "line": 9, "function": "Box.grow"}]
    assert rank(suspects, mutant) == 3
    assert rank(suspects[:2], mutant) is None
    assert bisector_layer("BisectionResult(backend='aot_eager_decomp_partition', subsystem='decomposition')") == \
        "decomp"
    assert bisector_layer("BisectionResult(backend='eager', subsystem=None)") == "dynamo"


def test_the_gpu_layer_is_its_own_and_only_a_gpu_run_mutates_it():
    assert [layer_of(f"torch/_inductor/{f}") for f in ("codegen/triton.py", "codegen/simd.py", "cudagraph_trees.py",
                                                        "runtime/triton_heuristics.py")] == ["gpu"] * 4
    assert layer_of("torch/_inductor/codegen/cpp.py") == layer_of("torch/_inductor/select_algorithm.py") == "inductor"
    cpu, gpu = mode_of(False, 1), mode_of(True, 4)
    assert cpu.wants("inductor") and not cpu.wants("gpu") and not cpu.fresh_cache and not cpu.by_file
    assert gpu.wants("gpu") and not gpu.wants("inductor") and gpu.fresh_cache and gpu.by_file
    assert sorted(p.name for p in gpu.kill_dir.glob("*.py")) == ["cudagraphs.py", "triton_codegen.py",
                                                                  "triton_templates.py"]
    assert int(gpu.env["TORCHINDUCTOR_COMPILE_THREADS"]) >= 1
    rerun = mode_of(True, 4, ("torch/_inductor/codegen/triton",))
    assert not rerun.wants("gpu", "torch/_inductor/codegen/triton_utils.py")
    assert rerun.wants("gpu", "torch/_inductor/cudagraph_trees.py")
    assert gpu.wants("gpu", "torch/_inductor/codegen/triton.py")


def test_workers_get_one_site_of_a_function_at_a_time(tiny: Path, tmp_path: Path):
    sites = sites_in(tiny, "torch/_inductor/tiny.py", set(range(1, 20)))
    grow = [s for s in sites if s.function == "Box.grow" and mutate(tiny, s)]
    helper = [s for s in sites if s.function == "helper" and mutate(tiny, s)]
    work = tmp_path / "work"
    work.mkdir()
    gen = Generator(work, mode_of(False, 2), tiny, work / "unused.db", 0, time.monotonic() + 60, "2.13.0")
    gen.queue = iter([(grow[0], ["a.py"]), (grow[1], ["a.py"]), (helper[0], ["a.py"]), (grow[2], ["a.py"])])
    first, second = gen.next(), gen.next()
    assert first is not None and second is not None
    assert (first[0], second[0]) == (grow[0], helper[0])  # grow[1] is passed over: its function is in flight
    assert first[2] == mutate(tiny, grow[0])
    gen.record(grow[0], "survived", 1.0, None)
    third = gen.next()
    assert third is not None and third[0] == grow[2]  # the function is free again
    assert gen.next() is None
    assert [json.loads(line)["id"] for line in (work / "tried.jsonl").read_text().splitlines()] == [grow[0].id]
    late = Generator(work, mode_of(False, 1), tiny, work / "unused.db", 0, time.monotonic() - 1, "2.13.0")
    late.queue = iter([(helper[0], ["a.py"])])
    assert late.next() is None  # past the deadline nothing is handed out


def _manifest() -> list[dict]:
    return [json.loads(line) for line in MANIFEST.read_text().splitlines()] if MANIFEST.exists() else []


def test_manifest_integrity():
    import torch

    torch_root = Path(torch.__file__).parent.parent
    here = torch.__version__.split("+")[0]
    mutants = _manifest()
    assert mutants, "bench/mutants/manifest.jsonl is empty"
    assert len({m["id"] for m in mutants}) == len(mutants)
    assert any(m["torch"] == here for m in mutants), f"no mutant edits this torch ({here})"
    for m in mutants:
        assert (layer_of(m["file"]) == "gpu") == m["kill_program"].startswith("bench/mutants/kill/gpu/"), m["id"]
        assert m["original"] != m["mutated"] and m["function_lines"][0] < m["line"] <= m["function_lines"][1]
        assert layer_of(m["file"]) == m["layer"] and m["id"].startswith(m["layer"] + "-")
        assert m["split"] == split_of(m["id"])
        assert m["failure"] in ("wrong_result", "crash", "crash_at_site")
        assert (MUTANTS.parents[1] / m["kill_program"]).is_file()
        assert Site(m["file"], m["line"], m["function"], tuple(m["function_lines"]), m["operator"],
                    m["occurrence"]).id == m["id"]
        if m["torch"] != here:  # another release's sources (the GPU layer is made on the CUDA machine's torch)
            assert re.fullmatch(r"\d+\.\d+\.\d+", m["torch"]), m["id"]
            continue
        source = (torch_root / m["file"]).read_text()
        assert source.count(m["original"]) == 1, m["id"]
        mutated = source.replace(m["original"], m["mutated"], 1)
        compile(mutated, m["file"], "exec")
        assert mutated != source
        span = innermost(function_spans(source), m["line"])
        assert span is not None and span[2] == m["function"] and list(span[:2]) == m["function_lines"], m["id"]



def test_a_bisector_only_pass_is_not_counted_as_localize_misses():
    ranked = {"split": "held_out", "layer": "gpu", "rank": 1, "localize_s": 80.0, "localized": True}
    bisected = {"split": "held_out", "layer": "gpu", "rank": None, "localize_s": None, "localized": False,
                "bisector_hit": True, "bisector_s": 100.0}
    lines = summary([ranked, bisected])
    gpu = next(line for line in lines if line.startswith("held_out  gpu"))
    assert "n=  1  top1 1/1" in gpu and "bisector layer hit 1/1" in gpu, gpu
    assert "localize not run" in summary([bisected])[0]
