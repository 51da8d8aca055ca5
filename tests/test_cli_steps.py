"""The human subcommands (localize, minify, artifacts, classify) call the step functions on a new or given case."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from pt2_bug_basher.case.store import Store
from pt2_bug_basher.cli.commands import BY_HAND
from pt2_bug_basher.cli.main import main
from pt2_bug_basher.domain.evidence import ClassifyEvidence, ReduceEvidence

GRAPH_BREAK = '''import torch


@torch.compile(backend="eager", fullgraph=True)
def f(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


f(torch.ones(4))
'''

TRACEBACK = '''Traceback (most recent call last):
  File "repro.py", line 11, in <module>
    f(torch.ones(4))
torch._dynamo.exc.Unsupported: Data-dependent branching
  Explanation: Detected data-dependent branching (e.g. `if my_tensor:`).
'''


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "repro.py").write_text(GRAPH_BREAK)
    return tmp_path


def run_cli(workdir: Path, capsys, *argv: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main([*argv, "--state-dir", str(workdir / "state"), "--repo", str(workdir / "repo"),
                 "--python", sys.executable] if argv[0] != "classify" else
                [*argv, "--state-dir", str(workdir / "state"), "--repo", str(workdir / "repo")])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_classify_reads_a_file_or_stdin_and_records_on_a_case(workdir: Path, capsys, monkeypatch):
    (workdir / "err.txt").write_text(TRACEBACK)
    code, out, _ = run_cli(workdir, capsys, "classify", str(workdir / "err.txt"))
    assert code == 0 and "Category  : graph_break" in out and "Diagnostic:" in out
    code, out, _ = run_cli(workdir, capsys, "classify", "-", "--json", stdin=TRACEBACK, monkeypatch=monkeypatch)
    assert code == 0 and json.loads(out)["category"] == "graph_break"
    code, _, err = run_cli(workdir, capsys, "classify", str(workdir / "missing.txt"))
    assert code == 2 and "cannot read" in err
    code, _, err = run_cli(workdir, capsys, "classify", str(workdir / "err.txt"), "--case", "case-nope")
    assert code == 2 and "unknown case_id" in err


def test_localize_then_minify_on_a_new_case(workdir: Path, capsys):
    script = str(workdir / "repo" / "repro.py")
    code, out, err = run_cli(workdir, capsys, "localize", script, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["first_failing"] == "eager" and result["layer"] == "Dynamo"
    assert {row["backend"] for row in result["table"]} >= {"eager", "inductor"}
    case_id = result["case_id"]
    store = Store(workdir / "state")
    assert [e.ok for e in store.evidence(case_id, "reproduce")] == [True]  # the command reproduced first
    code, out, err = run_cli(workdir, capsys, "minify", script, "--case", case_id, "--mode", "source",
                             "--budget", "120")
    assert code == 0, err
    assert "== Minify (source" in out and f"Case      : {case_id}" in out
    reduce = store.evidence(case_id, "reduce")
    assert reduce and reduce[-1].payload(ReduceEvidence).mode == "source"


def test_artifacts_by_hand_waives_the_test_gates_on_the_record(workdir: Path, capsys):
    code, out, err = run_cli(workdir, capsys, "artifacts", str(workdir / "repo" / "repro.py"))
    assert code == 0, err
    assert "== TORCH_COMPILE_DEBUG of" in out
    store = Store(workdir / "state")
    case = store.list_cases()[-1]
    assert {(w.step, w.reason) for w in store.waivers(case.case_id)} == {("test", BY_HAND), ("main_check", BY_HAND)}
    assert [e.step for e in store.evidence(case.case_id) if e.step == "artifacts"] == ["artifacts"]


def test_classify_on_a_case_records_the_classification(workdir: Path, capsys, monkeypatch):
    store = Store(workdir / "state")
    case = store.create_case(str(workdir / "repo"), sys.executable, {})
    code, _, err = run_cli(workdir, capsys, "classify", "-", "--case", case.case_id, stdin=TRACEBACK,
                           monkeypatch=monkeypatch)
    assert code == 0, err
    recorded = store.evidence(case.case_id, "classify")
    assert recorded and recorded[-1].payload(ClassifyEvidence).category == "graph_break"
