"""celebrate's summary and celebration through a real MCP client on a real git repository, with real
pytest runs: failure messages summarised cleanly, every added test listed, working-tree warnings
kept out of the PR text, and a celebration that fits the case."""

from __future__ import annotations

import pytest
from conftest_checkout import LARGE_TEST, Mini
from mcp import Client
from torch_checkout import add_test, fix_mini_bug, git

from pt2_bug_basher.content import celebrations
from pt2_bug_basher.domain.evidence import LocalizeRecord, ReproduceEvidence

pytestmark = pytest.mark.anyio

HINT = "To execute this test, run the following from the base repo dir:"
RERUN = "python test/test_ops.py TestOps.test_double_large"
# 242 characters: pytest's message, cut at 300, ended inside PyTorch's rerun hint ("...run the following from").
LONG_MESSAGE = ("double() got 21. Inputs above ten were rejected by a validation step that predates the current API. "
                "It was never removed, so every caller that passed a large number failed. Nothing relies on it. "
                "The check came from a prototype of this module.")
SECOND_TEST = """
def test_double_twenty(self):
    self.assertEqual(double(20), 40)
"""


async def call(client: Client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


# -- failure messages for a summary ----------------------------------------------------------------


def test_failure_summary_keeps_whole_sentences_and_the_whole_rerun_hint():
    from pt2_bug_basher.analysis.failure_text import summarise_failure, whole_sentences

    first = "ValueError: " + LONG_MESSAGE
    suppress = "This message can be suppressed by setting PYTORCH_PRINT_REPRO_ON_FAILURE=0"
    whole = f"{first}\n\n{HINT}\n    {RERUN}\n\n{suppress}"
    assert summarise_failure(whole, "ValueError") == summarise_failure(whole[:400], "ValueError")
    summary = summarise_failure(whole, "ValueError")
    assert summary.headline == first and summary.rerun == RERUN
    # Cut inside the hint's first line, or inside the command: the hint is dropped, never half-kept.
    for cut in (len(first) + 2 + 30, len(first) + 2 + len(HINT), whole.index(RERUN) + 10):
        cut_summary = summarise_failure(whole[:cut], "ValueError")
        assert cut_summary.headline == first and cut_summary.rerun is None, whole[:cut]
    # The type is added once; a headline that ends with ':' takes the next line; tracebacks are skipped.
    assert summarise_failure("double() got 21", "ValueError").headline == "ValueError: double() got 21"
    backend = ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nRuntimeError: bad shape\n\n"
               "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace")
    assert summarise_failure(backend, "BackendCompilerFailed").headline == (
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised: RuntimeError: bad shape")
    traceback = 'Traceback (most recent call last):\n  File "x.py", line 3, in f\nKeyError: \'missing\''
    assert summarise_failure(traceback, "KeyError").headline == "KeyError: 'missing'"
    assert summarise_failure("", "KeyError").headline == "KeyError"
    # Longer than the limit: whole sentences that fit, else whole words and an ellipsis.
    long = "AssertionError: " + " ".join(f"Sentence number {i} says something." for i in range(30))
    cut = summarise_failure(long, "AssertionError", limit=120).headline
    assert len(cut) <= 120 and cut.endswith("something.") and long.startswith(cut)
    words = whole_sentences("word " * 100, 50)
    assert words.endswith("word…") and len(words) <= 50


# -- celebrate ---------------------------------------------------------------------------------------


LONG_BUG = f"    if x > 10:\n        raise ValueError({LONG_MESSAGE!r})\n"


def long_message_bug(mini: Mini) -> None:
    """main and the work branch raise LONG_MESSAGE for large inputs."""
    ops = mini.repo / "pkg" / "ops.py"
    text = ops.read_text()
    fix_mini_bug(mini.repo)
    ops.write_text(ops.read_text().replace("    return x * 2\n", LONG_BUG + "    return x * 2\n", 1))
    assert ops.read_text() != text and LONG_BUG in ops.read_text()
    git(mini.repo, "commit", "-q", "-am", "double: explain the validation")
    git(mini.repo, "branch", "-f", "main", "work")


def fix_long_message_bug(mini: Mini) -> None:
    ops = mini.repo / "pkg" / "ops.py"
    ops.write_text(ops.read_text().replace(LONG_BUG, ""))


async def test_celebrate_summary_is_paste_ready_and_fits_a_cpu_dynamo_case(mini: Mini):
    long_message_bug(mini)
    case_id = mini.new_case(torch_env={"cuda_available": False, "gpus": [], "triton_version": None})
    mini.reproduce(case_id)
    mini.store.set_localization(case_id, LocalizeRecord(first_failing="eager", layer="Dynamo"))
    add_test(mini.repo, "test/test_ops.py", LARGE_TEST)
    add_test(mini.repo, "test/test_ops.py", SECOND_TEST)
    async with Client(mini.server) as client:
        registered = await call(client, "register_test", case_id=case_id, test_file="test/test_ops.py",
                                test_name="TestOps.test_double_large")
        assert registered["ok"] and HINT in registered["failure"]["message"], registered
        assert (await call(client, "make_worktree", case_id=case_id, action="create", ref="main"))["ok"]
        fix_long_message_bug(mini)
        (mini.repo / "scratch.py").write_text("print('scratch')\n")
        assert (await call(client, "run_tests", case_id=case_id, run_nearby=True))["verified"]
        reviewed = await call(client, "review_changes", case_id=case_id)
        both = ["test/test_ops.py::TestOps::test_double_large", "test/test_ops.py::TestOps::test_double_twenty"]
        assert reviewed["ok"] and reviewed["tests_added"] == both
        done = [await call(client, "celebrate", case_id=case_id,
                           root_cause="double() rejected inputs above ten through a validation nobody needed.",
                           fix_summary="Remove the validation so double() takes every number again.")
                for _ in range(6)]
    data = done[0]
    assert data["tests_added"] == both
    summary = data["summary"]
    for name in ("TestOps::test_double_large", "TestOps::test_double_twenty"):
        assert f"- Added `test/test_ops.py::{name}`" in summary
    # The second test was added, not registered: no run showed it failing before the fix, and the summary says so.
    assert data["tests_unregistered"] == [both[1]]
    assert f"- Added `{both[1]}`; not registered, so no run showed it failing before the fix" in summary
    assert f"- Added `{both[0]}`; before the fix it failed with" in summary
    # The failure: one clean line of whole sentences; PyTorch's hint complete, on its own line.
    assert data["failed_before"] == "ValueError: " + LONG_MESSAGE
    assert data["rerun_command"] == RERUN and f"run it alone: `{RERUN}`" in summary
    assert "To execute this test" not in summary and "This message can be" not in summary
    assert f"failed with `ValueError: {LONG_MESSAGE}`" in summary
    # The untracked file is the working tree's business, not a review note of the PR.
    assert any("scratch.py" in w for w in data["worktree_warnings"])
    assert not any("scratch.py" in w for w in data["review_warnings"])
    assert "scratch.py" not in summary and "scratch.py" in data["next_step"]
    # The fix and the tests are still uncommitted: the branch's HEAD lacks them, and celebrate says so.
    assert any(w.startswith("not committed yet:") and "pkg/ops.py" in w and "test/test_ops.py" in w
               for w in data["worktree_warnings"]), data["worktree_warnings"]
    assert "The change is not committed yet (pkg/ops.py" in data["next_step"]  # a fact, not an instruction
    git(mini.repo, "add", "pkg/ops.py", "test/test_ops.py")
    git(mini.repo, "commit", "-q", "-m", "double: no validation")
    async with Client(mini.server) as client:
        committed = await call(client, "celebrate", case_id=case_id, root_cause="r" * 20, fix_summary="f" * 20)
    assert not any(w.startswith("not committed yet:") for w in committed["worktree_warnings"]), committed
    assert "not committed yet" not in committed["next_step"]
    assert data["celebration"] not in summary
    # Every celebration fits a CPU-only Dynamo case, and none speaks of Triton, GPUs or other layers.
    category = mini.store.evidence(case_id, "reproduce")[-1].payload(ReproduceEvidence).category
    facts = {"device": {"cpu"}, "layer": {"dynamo"}, "main": {"failed"}, "category": {category},
             "compiler": {"torch.compile"}}
    fitting = {c.text for c in celebrations() if c.fits_case(facts)}
    lines = [d["celebration"] for d in done]
    assert set(lines) <= fitting and len(set(lines)) >= 4, lines
    assert not any(word in line for line in lines for word in ("Triton", "GPU", "Inductor", "AOT"))
    assert any("Dynamo" in c or "guard" in c for c in fitting)
    triton = next(c for c in celebrations() if "Triton" in c.text)
    assert not triton.fits_case(facts) and triton.fits_case({**facts, "device": {"gpu"}, "layer": {"inductor"}})
    # An export case hears of exported programs, not of torch.compile.
    exported = {c.text for c in celebrations() if c.fits_case({**facts, "layer": {"export"}, "compiler": {"export"}})}
    assert any("ep.module()" in c for c in exported) and not any("compile" in c for c in exported), exported


def test_a_new_test_file_is_part_of_the_change_and_other_untracked_files_are_not():
    # the second user-agent journal: the summary's change list left out the new, untracked test file
    from pt2_bug_basher.execution.review import FileStat
    from pt2_bug_basher.steps.celebrate import CelebrateResult, TestOutcomeLine, _markdown

    node = "test/test_decomp.py::DecompOneOffTests::test_hardsigmoid"
    result = CelebrateResult(
        case_id="c", root_cause="r" * 20, fix_summary="f" * 20, lines_changed=37, test_added=node,
        tests_added=[node], failed_before="AssertionError: x", tests_verified=[], waivers=[], celebration="",
        summary="", next_step="",
        diff_stat=[FileStat(path="torch/_decomp/decompositions.py", status="modified", added=1, removed=1),
                   FileStat(path="test/test_decomp.py", status="untracked", added=35, removed=0),
                   FileStat(path="scratch.py", status="untracked", added=1, removed=0)])
    text = _markdown(result)
    assert "Changed (37 lines):" in text
    assert "- `test/test_decomp.py` (+35 -0, new)" in text and "scratch.py" not in text
    assert "- `torch/_decomp/decompositions.py` (+1 -1)" in text
    assert "only the added tests ran" not in text  # nothing verified: nothing to say of it
    # verified on the added test alone (a user-agent journal): the summary says so
    result.tests_verified = [TestOutcomeLine(node_id=node, outcome="passed")]
    assert "only the added tests ran: no other test was found near them" in _markdown(result)
