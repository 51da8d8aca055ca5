"""Execution spectra: the coverage probe on real runs, the ranking on spectra, and localize on a bug that
no bisector subsystem holds (an AOTAutograd runtime wrapper), through a real MCP client."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mcp import Client

from pt2_bug_basher.analysis.spectra import FunctionSpan, Spectrum, files_to_read, function_spans, rank
from pt2_bug_basher.analysis.suspects import merge, spectrum_suspects
from pt2_bug_basher.domain.evidence import Suspect
from pt2_bug_basher.execution.runs import LAUNCHER, SPECTRUM_PROBE

MODULE = textwrap.dedent('''\
    import os


    def plumbing(x):
        y = x + 1
        return guilty(y) if x else other(y)


    class Lower:
        def guilty(self, y):
            if y > 3:
                y -= 1
                y *= 2
            return y

        def helper(self, y):
            def inner():
                return y
            return inner()


    def other(y):
        return y
    ''')
FILE = "torch/_functorch/m.py"


def lines(*numbers: int) -> frozenset[int]:
    return frozenset(numbers)


def test_function_spans_are_qualified_with_classes_and_locals():
    spans = {s.qualname: (s.first, s.last) for s in function_spans(MODULE)}
    assert spans == {"plumbing": (4, 6), "Lower.guilty": (10, 14), "Lower.helper": (16, 19),
                     "Lower.helper.<locals>.inner": (17, 18), "other": (22, 23)}
    assert function_spans("def broken(:\n") == []


def test_a_near_miss_passing_run_separates_the_guilty_function_from_plumbing():
    # every run passes through plumbing; only failing runs take the branch in Lower.guilty
    fail = [Spectrum(f"f{i}", True, {FILE: lines(1, 5, 6, 11, 12, 13, 14)}) for i in range(2)]
    near = Spectrum("p1", False, {FILE: lines(1, 5, 6, 11, 14)})  # reaches guilty, not its branch
    far = Spectrum("p2", False, {FILE: lines(1, 5, 6, 23)})
    for formula in ("ochiai", "dstar"):
        ranked = rank([*fail, near, far], {FILE: MODULE}, formula)
        assert [r.function for r in ranked][0] == "Lower.guilty", (formula, ranked)
        top = ranked[0]
        assert top.failing_only == [(12, 13)] and top.lines_at_score == 2
        assert (top.failed_runs, top.passed_runs) == (2, 1)
        assert "plumbing" not in [r.function for r in ranked[:1]]
    # module-level lines (line 1: run at import) rank nothing; nor do files without their source
    assert all(r.first > 1 for r in rank([*fail, near, far], {FILE: MODULE}))
    assert rank([*fail, near, far], {}) == []


def test_without_a_passing_run_nothing_is_ranked():
    fail = Spectrum("f", True, {FILE: lines(5, 6, 11)})
    assert rank([fail], {FILE: MODULE}) == []
    assert files_to_read([fail]) == {FILE}


def test_files_that_every_passing_run_ran_in_full_need_not_be_read():
    fail = Spectrum("f", True, {FILE: lines(5, 6), "torch/fx/a.py": lines(3, 4)})
    ok = Spectrum("p", False, {FILE: lines(5, 6, 23), "torch/fx/a.py": lines(3)})
    assert files_to_read([fail, ok]) == {"torch/fx/a.py"}


def test_spectrum_evidence_joins_the_suspect_another_mechanism_named_and_weights_order_them():
    fail = [Spectrum(f"f{i}", True, {FILE: lines(5, 6, 11, 12, 13, 14)}) for i in range(2)]
    ok = Spectrum("p", False, {FILE: lines(5, 6, 23)})
    ranked = rank([*fail, ok], {FILE: MODULE})
    spectral = spectrum_suspects(ranked, "ochiai", 2, 1)
    frame = Suspect(file=FILE, line=13, function="Lower.guilty", why="innermost torch frame of KeyError",
                    evidence=["exception"])
    helper = Suspect(file="torch/_inductor/x.py", line=3, function="h", why="helper", evidence=["helper"])
    merged = merge([helper, frame], spectral)
    assert merged[0].function == "Lower.guilty" and merged[0].evidence == ["exception", "spectrum"], merged
    assert "execution spectra: ochiai 1.00" in merged[0].why and merged[0].lines[0].first == 11
    assert [s.function for s in merged].count("Lower.guilty") == 1
    assert merged[-1].function in ("h", "plumbing"), merged


def test_a_spectrum_suspect_says_how_many_functions_tie_with_it():
    fail = [Spectrum(f"f{i}", True, {FILE: lines(5, 11, 12, 23)}) for i in range(2)]
    ok = Spectrum("p", False, {FILE: lines(5)})
    tied = [s for s, _ in spectrum_suspects(rank([*fail, ok], {FILE: MODULE}), "ochiai", 2, 1)]
    assert {s.function for s in tied[:2]} == {"Lower.guilty", "other"}
    assert all("tied with 1 other function(s)" in s.why for s in tied[:2]), tied
    assert tied[2].function == "plumbing" and "tied" not in tied[2].why
    near = Spectrum("p2", False, {FILE: lines(5, 23)})  # a near miss splits the tie
    apart = [s for s, _ in spectrum_suspects(rank([*fail, ok, near], {FILE: MODULE}), "ochiai", 2, 2)]
    assert apart[0].function == "Lower.guilty" and "tied" not in apart[0].why, apart


# -- the probe on real runs --------------------------------------------------------------------

SCRIPT = textwrap.dedent('''\
    import sys
    import torch


    def f(x, h):
        {op}
        return h * 2


    x = torch.ones(4)
    h = torch.ones(4, requires_grad=True).clone()
    torch.compile(f, backend="aot_eager")(x, h)
    sys.exit(3)
    ''')


def probe_run(tmp: Path, name: str, op: str) -> tuple[subprocess.CompletedProcess, dict]:
    script = tmp / f"{name}.py"
    script.write_text(SCRIPT.replace("{op}", op))
    out = tmp / f"{name}.json"
    proc = subprocess.run([sys.executable, str(SPECTRUM_PROBE), "--out", str(out), "--", str(LAUNCHER), "--",
                           str(script)], cwd=tmp, capture_output=True, text=True, timeout=300)
    return proc, json.loads(out.read_text())


@pytest.fixture(scope="module")
def real_spectra(tmp_path_factory) -> tuple[list[Spectrum], dict]:
    tmp = tmp_path_factory.mktemp("spectra")
    mutated, data = probe_run(tmp, "mutates", "h.add_(x)")
    assert mutated.returncode == 3, mutated.stderr  # the script's own exit status survives the probe
    clean, other = probe_run(tmp, "pure", "h = h + x")
    assert clean.returncode == 3, clean.stderr
    spectra = [Spectrum("m", True, {f: frozenset(ls) for f, ls in data["lines"].items()}, root=data["torch"]),
               Spectrum("p", False, {f: frozenset(ls) for f, ls in other["lines"].items()}, root=other["torch"])]
    return spectra, data


@pytest.mark.slow
def test_the_probe_records_the_compiler_lines_a_real_run_ran(real_spectra):
    spectra, data = real_spectra
    import torch

    assert Path(data["torch"]) == Path(torch.__file__).parent.parent
    files = set(data["lines"])
    assert any(f.startswith("torch/_dynamo/") for f in files) and any(f.startswith("torch/_functorch/") for f in files)
    assert not any(f.startswith("torch/nn/") or f.startswith("torch/_tensor") for f in files), sorted(files)[:20]
    assert all(f.endswith(".py") and (Path(data["torch"]) / f).is_file() for f in files)  # no generated code
    # the run with an input mutation, against the same program without it: Dynamo traced a method call
    # (add_) and AOTAutograd generated the epilogue that copies the mutation back only there
    sources = {f: (Path(data["torch"]) / f).read_text() for f in files_to_read(spectra)}
    ranked = rank(spectra, sources)
    names = [r.function for r in ranked]
    assert ranked and ranked[0].score == 1.0, ranked[:3]
    assert "_create_runtime_wrapper" in names[:5] and "TensorVariable.call_method" in names[:5], names
    wrapper = next(r for r in ranked if r.function == "_create_runtime_wrapper")
    assert wrapper.file == "torch/_functorch/_aot_autograd/runtime_wrappers.py" and wrapper.failing_only


# -- localize end to end on a planted bug outside every bisector subsystem ---------------------

RUNTIME_WRAPPER_FILE = "torch/_functorch/_aot_autograd/runtime_wrappers.py"
RUNTIME_WRAPPER_OLD = '                        mut_lines.append(f"    {oi}.copy_({ui})")\n'
RUNTIME_WRAPPER_NEW = ('                        if not trace_joint:\n'
                       '                            mut_lines.append(f"    {oi}.copy_({ui})")\n')
RUNTIME_WRAPPER_REPRO = textwrap.dedent('''\
    import torch


    def f(x, h):
        h.add_(x)
        return h * 2


    if __name__ == "__main__":
        x = torch.randn(4)
        base = torch.randn(4, requires_grad=True)
        h1, h2 = base.clone(), base.clone()
        torch.compile(f)(x, h1)
        f(x, h2)
        torch.testing.assert_close(h1, h2)
    ''')


@pytest.fixture(scope="module")
def runtime_wrapper_bug(tmp_path_factory):
    from planted_bugs import PlantedBug, plant
    from torch_checkout import build_torch_checkout

    made = build_torch_checkout(tmp_path_factory.mktemp("wrapper"))
    bug = PlantedBug(name="runtime_wrapper", file=RUNTIME_WRAPPER_FILE, old=RUNTIME_WRAPPER_OLD,
                     new=RUNTIME_WRAPPER_NEW, repro=RUNTIME_WRAPPER_REPRO, layer="AOTAutograd",
                     guilty="_create_runtime_wrapper", what="an input mutation is not applied back when the "
                     "graph is traced jointly (an input requires grad)", commit_message="AOTAutograd: tidy")
    plant(made.checkout, bug)
    (made.checkout / "repro_wrapper.py").write_text(bug.repro)
    return made


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_bug_in_an_aot_autograd_runtime_wrapper_is_named_by_the_spectra(runtime_wrapper_bug):
    from pt2_bug_basher.case.config import ServerConfig
    from pt2_bug_basher.mcp_server.server import create_server

    made = runtime_wrapper_bug
    config = ServerConfig(state_dir=made.root / "state", default_repo=made.checkout, allowed_roots=(made.root,))
    async with Client(create_server(config)) as client:
        env = await client.call_tool("check_env", {"python": str(made.python), "repo": str(made.checkout)})
        case_id = env.structured_content["case_id"]
        run = await client.call_tool("run_with_logs", {"case_id": case_id, "script": "repro_wrapper.py",
                                                       "repeat": 2})
        assert run.structured_content["reproduced"], run.structured_content
        result = await client.call_tool("localize", {"case_id": case_id})
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert data["layer"] == "AOTAutograd", data["table"]
    outcomes = {v["kind"]: v["outcome"] for v in data["variants"] if v["line"] in (5, 11)}
    assert outcomes.get("no_requires_grad") == "passes" and outcomes.get("out_of_place") == "passes", data["variants"]
    assert any("does not require grad" in c for c in data["circumstances"]), data["circumstances"]
    top3 = [(s["file"], s["function"]) for s in data["suspects"][:3]]
    assert (RUNTIME_WRAPPER_FILE, "_create_runtime_wrapper") in top3, data["suspects"][:5]
    guilty = next(s for s in data["suspects"] if s["function"] == "_create_runtime_wrapper")
    assert "spectrum" in guilty["evidence"] and "execution spectra" in guilty["why"], guilty
    source = (made.checkout / RUNTIME_WRAPPER_FILE).read_text().splitlines()
    assert source[guilty["line"] - 1].startswith("def _create_runtime_wrapper("), guilty
    # Ochiai (localize's formula) against DStar on the spectra this case recorded: Ochiai ranks it no lower
    from pt2_bug_basher.case.store import Store

    spectra = recorded_spectra(Store(config.state_dir).case_dir(case_id), data)
    assert any(s.failed for s in spectra) and any(not s.failed for s in spectra)
    sources = {f: (made.checkout / f).read_text() for f in files_to_read(spectra)}
    ranks = {formula: [r.function for r in rank(spectra, sources, formula, limit=50)] for formula in ("ochiai",
                                                                                                         "dstar")}
    place = {f: names.index("_create_runtime_wrapper") + 1 if "_create_runtime_wrapper" in names else 99
             for f, names in ranks.items()}
    print(f"rank of the guilty function: {place} over {len(spectra)} spectra")
    assert place["ochiai"] <= min(3, place["dstar"]), (place, ranks)


def recorded_spectra(case_dir: Path, data: dict) -> list[Spectrum]:
    """The spectra localize recorded for its ladder rungs and variants, labelled by their outcomes."""
    from pt2_bug_basher.reduce.variants import read_spectrum

    found: list[Spectrum] = []
    for row in data["table"]:
        if row["outcome"] in ("same failure", "passes"):
            for path in (case_dir / "spectra").glob(f"{row['backend']}-{row['dynamic']}-*.json"):
                found += [s for s in [read_spectrum(path, row["run_id"], row["outcome"] == "same failure", "")] if s]
    for variant in data["variants"]:
        if variant["outcome"] in ("same failure", "passes"):
            for path in (case_dir / "variants").glob(f"{variant['id']}-*.json"):
                found += [s for s in [read_spectrum(path, variant["run_id"], variant["outcome"] == "same failure",
                                                    "")] if s]
    return found


def test_spans_type_is_hashable_for_the_ranking():
    assert len({FunctionSpan("a", 1, 2), FunctionSpan("a", 1, 2)}) == 1


OLD_UNLIFT = '''\
def copy_back(outputs, mutated):
    copies = []
    for out, name in zip(outputs, mutated):
        if name is None:
            continue
        copies.append((name, out))
    return copies


def untouched(x):
    return x
'''


def _unlift_changed_by_a_commit(tmp_path: Path):
    """A repository (no remote) whose unlift.py was imported, then changed at lines 6-7 by HEAD."""
    import git

    repo = git.Repo.init(tmp_path)
    path = tmp_path / "torch" / "export" / "unlift.py"
    path.parent.mkdir(parents=True)
    path.write_text(OLD_UNLIFT)
    repo.index.add([str(path)])
    repo.index.commit("torch sources")
    path.write_text(OLD_UNLIFT.replace("            continue\n", "            continue\n        if out.shape:\n"
                                       "            continue\n"))
    repo.index.add([str(path)])
    repo.index.commit("skip the copy-back for same-shaped outputs")
    return repo, path


def test_recently_changed_lines_the_failing_runs_ran_name_their_function(tmp_path: Path):
    """The history and the spectra point at the same lines: the function a recent commit changed whose new lines
    only the failing runs ran is named, with the commit, even when the spectra alone tie it with others."""
    from pt2_bug_basher.analysis.spectra import changed_lines_ran
    from pt2_bug_basher.execution.gitstate import recently_changed_lines
    from pt2_bug_basher.execution.history import recent_changes
    from pt2_bug_basher.steps.localize import changed_functions_ran

    _unlift_changed_by_a_commit(tmp_path)
    file = "torch/export/unlift.py"
    assert recently_changed_lines(tmp_path, [file]) == {file: {6, 7}}
    assert recently_changed_lines(tmp_path, [file], within=0) == {}  # nothing is recent: HEAD is the base

    def run(failed: bool, lines: set[int]) -> Spectrum:
        return Spectrum(f"run-{failed}-{len(lines)}", failed, {file: frozenset(lines)}, root=str(tmp_path))

    body = {1, 2, 3, 4, 6, 8, 9, 13}
    spectra = [run(True, body | {7}), run(False, {1, 2, 3, 4, 5, 9}), run(False, body | {14})]
    assert [(c.line, c.failed_runs, c.passed_runs) for c in changed_lines_ran(spectra, {file: {6, 7}})] == \
        [(7, 1, 0), (6, 1, 1)]
    assert changed_lines_ran(spectra, {file: {1, 5, 14}}) == []  # every passing run ran it, or no failing one did
    [found] = changed_functions_ran(tmp_path, spectra)
    assert (found.file, found.function, found.line) == (file, "copy_back", 7)
    [change] = recent_changes(tmp_path, [(found.file, found.line, found.function)], {(file, "copy_back"): found.why})
    assert change.change.subject == "skip the copy-back for same-shaped outputs" and change.reached == found.why
    # torch imported from elsewhere: its lines say nothing about this repository's history
    elsewhere = [Spectrum(s.run_id, s.failed, s.lines, root=str(tmp_path / "site-packages")) for s in spectra]
    assert changed_functions_ran(tmp_path, elsewhere) == []


def test_with_no_passing_run_only_the_users_own_changes_that_ran_are_named(tmp_path: Path):
    """No run passed, so the spectra cannot contrast anything: a change the failing runs ran is named only when
    it is the user's own (a commit no remote branch holds, or an uncommitted edit), never a pushed commit."""
    from pt2_bug_basher.execution.gitstate import recent_change, unpushed_changed_lines
    from pt2_bug_basher.execution.history import change_sentence, recent_changes
    from pt2_bug_basher.steps.localize import changed_functions_ran

    repo, path = _unlift_changed_by_a_commit(tmp_path)
    file = "torch/export/unlift.py"
    failing = [Spectrum(f"run-{i}", True, {file: frozenset({1, 2, 3, 4, 6, 7, 8, 9, 13})}, root=str(tmp_path))
               for i in range(2)]
    # no remote: every commit is the user's own, the root commit (the whole tree) excepted
    assert unpushed_changed_lines(tmp_path, [file]) == {file: {6, 7}}
    [found] = changed_functions_ran(tmp_path, failing)
    assert (found.file, found.function) == (file, "copy_back")
    assert "no run passed" in found.why and "2/2 failing" in found.why and "yours" in found.why, found.why
    # a passing run that ran the same lines does not clear the user's own change
    ran_too = Spectrum("run-pass", False, {file: frozenset({1, 2, 3, 4, 6, 7, 8, 9, 13})}, root=str(tmp_path))
    [found] = changed_functions_ran(tmp_path, [*failing, ran_too])
    assert found.function == "copy_back" and "1/1 passing" in found.why, found.why
    # the same commit pushed (a remote-tracking branch holds it): upstream history, which needs a run that
    # passes without the changed lines to count
    repo.git.update_ref("refs/remotes/origin/main", "HEAD")
    assert unpushed_changed_lines(tmp_path, [file]) == {}
    assert changed_functions_ran(tmp_path, failing) == []
    assert changed_functions_ran(tmp_path, [*failing, ran_too]) == []
    # an uncommitted edit on top of it is the user's again, and is read with git diff
    path.write_text(path.read_text().replace("if out.shape:", "if out.shape and True:"))
    assert unpushed_changed_lines(tmp_path, [file]) == {file: {6}}
    [found] = changed_functions_ran(tmp_path, failing)
    change = recent_change(tmp_path, file, 6, 7)
    assert change is not None and change.commits_before_head == -1
    [sentence] = [change_sentence(c) for c in recent_changes(tmp_path, [(file, found.line, found.function)])]
    assert "uncommitted edits" in sentence and f"git diff -- {file}" in sentence, sentence


@pytest.mark.anyio
async def test_the_note_on_no_passing_run_names_good_ref_only_where_it_was_not_passed():
    from pt2_bug_basher.reduce.ladder import LocalizeResult
    from pt2_bug_basher.steps.localize import GOOD_REF_HINT, NO_PASSING_RUN, _rank

    failing = [Spectrum(f"run-{i}", True, {"torch/fx/graph.py": frozenset({1, 2})}) for i in range(2)]
    for given, note in ((False, f"{NO_PASSING_RUN} {GOOD_REF_HINT}"), (True, NO_PASSING_RUN)):
        result = LocalizeResult.model_construct(suspects=[], notes=[])
        await _rank(result, failing, given)
        assert result.notes == [note]
    result = LocalizeResult.model_construct(suspects=[], notes=[])
    await _rank(result, [*failing, Spectrum("run-ok", False, {"torch/fx/graph.py": frozenset({1})})], False)
    assert result.notes == []


def test_a_pushed_change_since_the_commit_where_the_repro_passed_is_named_without_a_passing_run(tmp_path: Path):
    """The agent says it worked before a pull (good_ref): the lines changed since then that a failing run ran
    are suspects although the commit is pushed and no run passed, and those that no failing run ran are not."""
    from pt2_bug_basher.domain.errors import InvalidInput
    from pt2_bug_basher.execution.gitstate import good_commit
    from pt2_bug_basher.execution.history import recent_changes
    from pt2_bug_basher.steps.localize import Since, changed_functions_ran

    repo, _path = _unlift_changed_by_a_commit(tmp_path)
    repo.git.update_ref("refs/remotes/origin/main", "HEAD")  # upstream history
    file = "torch/export/unlift.py"
    failing = [Spectrum(f"run-{i}", True, {file: frozenset({1, 2, 3, 4, 6, 7, 8, 9, 13})}, root=str(tmp_path))
               for i in range(2)]
    assert changed_functions_ran(tmp_path, failing) == []  # pushed, and nothing passed: no evidence
    first = repo.git.rev_list("--max-parents=0", "HEAD").strip()
    for ref in ("HEAD~1", first, first[:10]):
        commit, ahead = good_commit(tmp_path, ref)
        assert (commit, ahead) == (first, 1)
        [found] = changed_functions_ran(tmp_path, failing, Since(ref, commit, ahead))
        assert (found.file, found.function, found.line) == (file, "copy_back", 6)  # its first changed line
        assert f"changed since good_ref {ref}, where the repro passed" in found.why, found.why
    [change] = recent_changes(tmp_path, [(found.file, found.line, found.function)], within=2)
    assert change.change.subject == "skip the copy-back for same-shaped outputs"
    # changed lines no failing run ran say nothing
    elsewhere = [Spectrum(s.run_id, True, {file: frozenset({1, 2, 3})}, root=str(tmp_path)) for s in failing]
    assert changed_functions_ran(tmp_path, elsewhere, Since("HEAD~1", first, 1)) == []
    # HEAD itself: nothing changed since
    head = repo.head.commit.hexsha
    assert changed_functions_ran(tmp_path, failing, Since("HEAD", head, 0)) == []
    # refs that name no ancestor of HEAD, or are not refs, are the agent's to fix
    repo.git.checkout("-q", "-b", "side", first)
    (tmp_path / "other.py").write_text("x = 1\n")
    repo.index.add([str(tmp_path / "other.py")])
    side = repo.index.commit("a side branch").hexsha
    repo.git.checkout("-q", "-")
    for bad in ("no-such-ref", side, "-p", "HEAD\nx", "HEAD~9"):
        with pytest.raises(InvalidInput, match="good_ref"):
            good_commit(tmp_path, bad)
