"""The mutation benchmark (bench/mutants): site selection, the kill driver, the manifest's integrity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

MUTANTS = Path(__file__).resolve().parents[1] / "bench" / "mutants"
sys.path.insert(0, str(MUTANTS))

from cosmic_ray.mutating import mutate_code  # noqa: E402
from generate import MANIFEST, split_of  # noqa: E402
from operators import operator  # noqa: E402
from score import bisector_layer, rank  # noqa: E402
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


def _manifest() -> list[dict]:
    return [json.loads(line) for line in MANIFEST.read_text().splitlines()] if MANIFEST.exists() else []


def test_manifest_integrity():
    import torch

    torch_root = Path(torch.__file__).parent.parent
    mutants = _manifest()
    assert mutants, "bench/mutants/manifest.jsonl is empty"
    assert len({m["id"] for m in mutants}) == len(mutants)
    for m in mutants:
        source = (torch_root / m["file"]).read_text()
        assert source.count(m["original"]) == 1, m["id"]
        mutated = source.replace(m["original"], m["mutated"], 1)
        compile(mutated, m["file"], "exec")
        assert mutated != source
        span = innermost(function_spans(source), m["line"])
        assert span is not None and span[2] == m["function"] and list(span[:2]) == m["function_lines"], m["id"]
        assert layer_of(m["file"]) == m["layer"] and m["id"].startswith(m["layer"] + "-")
        assert m["split"] == split_of(m["id"])
        assert m["failure"] in ("wrong_result", "crash", "crash_at_site")
        assert (MUTANTS.parents[1] / m["kill_program"]).is_file()
        assert Site(m["file"], m["line"], m["function"], tuple(m["function_lines"]), m["operator"],
                    m["occurrence"]).id == m["id"]
