"""The whole method, end to end, on a real torch checkout with a real bug planted in Dynamo.

The installed torch becomes a git checkout of its own Python sources (tracked on `main`; the
compiled parts present but untracked, as in a develop build) and a virtualenv imports torch from
it. A bug is committed on `main` in Dynamo's handling of `sorted()`; the agent works on a `fix`
branch. An MCP client drives the server the way an agent would, from check_env to celebrate, and
every gate is shown refusing when its step is skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from torch_checkout import (
    BUILTIN,
    REPRO,
    TorchCheckout,
    add_registered_test,
    build_torch_checkout,
    fix_planted_bug,
    git,
)

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.mcp_server.server import create_server

pytestmark = pytest.mark.anyio

TEST_FILE = "test/dynamo/test_repros.py"
TEST_NAME = "ReproTests.test_sorted_without_kwargs"
NODE_ID = f"{TEST_FILE}::ReproTests::test_sorted_without_kwargs"
CELEBRATE = {"root_cause": "BuiltinVariable.call_sorted read kwargs['reverse'] unconditionally, so sorted() "
                           "without reverse= raised KeyError inside Dynamo (InternalTorchDynamoError).",
             "fix_summary": "Drop the unconditional lookup: the kwargs go to list.sort as they are."}


@pytest.fixture(scope="session")
def torch_checkout(tmp_path_factory: pytest.TempPathFactory) -> TorchCheckout:
    return build_torch_checkout(tmp_path_factory.mktemp("e2e"))


async def ok(client: Client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, (tool, result.content[0].text if result.content else result)
    return result.structured_content


async def refused(client: Client, tool: str, *expected: str, **arguments) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, (tool, result.structured_content)
    text = result.content[0].text
    for part in expected:
        assert part in text, (tool, part, text)
    assert "Traceback" not in text
    return text


def step(status: dict, name: str) -> str:
    return next(s for s in status["case"]["steps"] if s["step"] == name)["status"]


async def test_the_whole_method_on_a_torch_checkout(torch_checkout: TorchCheckout):
    checkout = torch_checkout.checkout
    # The server as the CLI starts it in a repository: the state directory inside the checkout.
    server = create_server(ServerConfig.from_options(repo=checkout))
    celebrate_args = dict(CELEBRATE)
    async with Client(server) as client:
        env = await ok(client, "check_env", python=str(torch_checkout.python), repo=str(checkout))
        assert env["ok"] and env["torch"]["imported_from_repo"] is True, env
        assert Path(env["torch"]["file"]).is_relative_to(checkout)
        case_id = env["case_id"]
        args = {"case_id": case_id}

        # Every gate refuses until its steps are done, naming the call that opens it.
        await refused(client, "register_test", "step 2", "run_with_logs(", **args, test_file=TEST_FILE,
                      test_name=TEST_NAME)
        await refused(client, "make_worktree", "step 4", "register_test(", **args)
        await refused(client, "run_tests", "step 4", "register_test(", **args)
        await refused(client, "review_changes", "step 4", **args)
        await refused(client, "celebrate", "step 4", **args, **celebrate_args)

        # Step 2: reproduce, twice, the same way.
        (checkout / "repro_sorted.py").write_text(REPRO)
        repro = await ok(client, "run_with_logs", **args, script="repro_sorted.py", repeat=2)
        assert repro["reproduced"] is True, repro
        failure = repro["failure"]
        assert failure["exception_type"].endswith("InternalTorchDynamoError")
        assert "reverse" in failure["message"]
        assert "reproduce" in repro["recorded"]
        # a develop build: the frame's function that the last commit changed comes first, naming that commit
        top = repro["suspects"][0]
        assert top["function"].endswith("call_sorted") and "recent_change" in top["evidence"], repro["suspects"]
        assert torch_checkout.planted_commit[:12] in top["why"] and "HEAD itself" in top["why"], top
        assert any(torch_checkout.planted_commit[:12] in note for note in repro["notes"]), repro["notes"]

        # Step 3 is waived; step 4 refuses the catch-all file first.
        await refused(client, "register_test", "step 3", "waive_step(", **args, test_file=TEST_FILE,
                      test_name=TEST_NAME)
        await ok(client, "waive_step", **args, step="reduce", reason="the repro is already six lines long")
        await refused(client, "register_test", "test/dynamo/test_misc.py is a catch-all file", TEST_FILE,
                      **args, test_file="test/dynamo/test_misc.py", test_name=TEST_NAME)
        await refused(client, "register_test", "no method 'test_sorted_without_kwargs'", **args,
                      test_file=TEST_FILE, test_name=TEST_NAME)
        add_registered_test(checkout)
        registered = await ok(client, "register_test", **args, test_file=TEST_FILE, test_name=TEST_NAME)
        assert registered["ok"] is True and registered["node_id"] == NODE_ID, registered
        assert registered["failure"]["exception_type"].endswith("InternalTorchDynamoError")
        assert registered["failure"]["category"] == failure["category"]
        assert "torch/_dynamo/variables/builtin.py" in registered["failure"]["frame"]
        assert str(checkout) in registered["failure"]["frame"]  # the checkout's Dynamo ran
        await refused(client, "review_changes", "step 5", "make_worktree(", **args)

        # Step 5 on a ref without the bug: the worktree's own torch sources run, so the test passes
        # there and the case stops.
        clean = await ok(client, "make_worktree", **args, action="create", ref="clean")
        worktree = Path(clean["worktree"])
        assert worktree.is_relative_to(checkout / ".pt2-bug-basher" / "worktrees")
        assert clean["imports_worktree_sources"] is True
        assert clean["torch_file"] == str(worktree / "torch" / "__init__.py")
        assert clean["linked_build_outputs"] > 0
        assert (worktree / "torch" / "lib").is_symlink() and (worktree / "torch" / "version.py").is_symlink()
        assert not (worktree / "torch" / "lib").resolve().is_relative_to(worktree)  # linked, not copied
        assert 'kwargs["reverse"]' not in (worktree / BUILTIN).read_text()
        assert clean["outcome"] == "passed" and clean["ok"] is False and clean["stopped"]
        assert "passes on clean" in clean["stopped"]
        status = await ok(client, "get_workflow", **args)
        assert status["case"]["stopped"] and step(status, "main_check") == "stopped"
        await refused(client, "run_tests", "stopped", **args)
        await refused(client, "review_changes", "stopped", **args)
        await refused(client, "celebrate", "stopped", **args, **celebrate_args)
        removed = await ok(client, "make_worktree", **args, action="remove", ref="clean")
        assert removed["ok"] and not worktree.exists()

        # Registering the test again reopens the case; on main the test fails as on the branch.
        await ok(client, "register_test", **args, test_file=TEST_FILE, test_name=TEST_NAME)
        assert (await ok(client, "get_workflow", **args))["case"]["stopped"] is None
        on_main = await ok(client, "make_worktree", **args, action="create", ref="main")
        assert on_main["ok"] is True and on_main["outcome"] == "failed", on_main
        assert on_main["imports_worktree_sources"] is True
        assert on_main["commit"] == torch_checkout.planted_commit
        assert on_main["failure"]["frame"].startswith(on_main["worktree"])  # main's Dynamo, in the worktree
        assert "def test_sorted_without_kwargs" in (Path(on_main["worktree"]) / TEST_FILE).read_text()

        # Steps 6 and 7: logs and classification.
        logs = await ok(client, "run_with_logs", **args, script="repro_sorted.py", repeat=1, logs="dynamo_internal")
        assert "logs" in logs["recorded"]
        classified = await ok(client, "classify_error", **args, run_id=repro["runs"][0]["run_id"])
        assert classified["recorded"] and classified["category"] == failure["category"]

        # Verification and the later steps refuse until the fix is verified.
        await refused(client, "review_changes", "step 11", "run_tests(", **args)
        await refused(client, "celebrate", "step 11", **args, **celebrate_args)
        before = await ok(client, "run_tests", **args)
        assert before["verified"] is False and before["registered"] == f"{NODE_ID}: failed"

        # Steps 9 and 10: the agent's fix, on the fix branch.
        fix_planted_bug(checkout)
        verified = await ok(client, "run_tests", **args, run_nearby=True)
        assert verified["verified"] is True, verified
        assert verified["registered"] == f"{NODE_ID}: passed"
        assert "sorted" in verified["nearby_keywords"]
        nearby = [n["node_id"] for n in verified["nearby"]]
        assert f"{TEST_FILE}::ReproTests::test_sorted_reverse" in nearby[:2]
        assert f"{TEST_FILE}::ReproTests::test_sorted_key" in nearby[:2]
        assert verified["counts"]["passed"] == 4 and verified["counts"]["failed"] == 0
        await refused(client, "celebrate", "step 12", "review_changes(", **args, **celebrate_args)

        # A change after verification makes it stale: review and celebrate refuse.
        builtin = checkout / BUILTIN
        fixed = builtin.read_text()
        marker = '            list_var.call_method(tx, "sort", [], kwargs)\n'
        builtin.write_text(fixed.replace(marker, '            print("sorting", kwargs)\n' + marker))
        assert step(await ok(client, "get_workflow", **args), "verify") == "stale"
        await refused(client, "review_changes", "earlier state of the code", "run_tests(", **args)
        await refused(client, "celebrate", "earlier state of the code", **args, **celebrate_args)

        # The tests pass with a leftover print, but the review blocks it.
        assert (await ok(client, "run_tests", **args, run_nearby=True))["verified"] is True
        reviewed = await ok(client, "review_changes", **args)
        assert reviewed["ok"] is False
        leftovers = [f for f in reviewed["findings"] if f["kind"] == "debug_leftover"]
        assert [(f["file"], f["severity"]) for f in leftovers] == [(BUILTIN, "blocking")]
        await refused(client, "celebrate", "step 12", **args, **celebrate_args)

        builtin.write_text(fixed)
        assert (await ok(client, "run_tests", **args, run_nearby=True))["verified"] is True
        reviewed = await ok(client, "review_changes", **args)
        assert reviewed["ok"] is True, reviewed["findings"]
        files = {f["path"]: f for f in reviewed["files"]}
        assert files[BUILTIN]["removed"] == 1 and files[BUILTIN]["added"] == 0
        assert files[TEST_FILE]["added"] > 5
        assert files["repro_sorted.py"]["status"] == "untracked"  # flagged, not blocking
        assert reviewed["base"] == f"main @ {torch_checkout.planted_commit[:12]}"
        assert '-            reverse = kwargs["reverse"]' in reviewed["diff"]

        done = await ok(client, "celebrate", **args, **celebrate_args)
        assert done["test_added"] == f"{TEST_FILE}::{TEST_NAME.replace('.', '::')}"
        assert "InternalTorchDynamoError" in done["failed_before"]
        assert {t["outcome"] for t in done["tests_verified"]} == {"passed"}
        assert {s["path"] for s in done["diff_stat"]} >= {BUILTIN, TEST_FILE}
        assert done["waivers"] == [{"step": "reduce", "reason": "the repro is already six lines long"}]
        assert done["celebration"].strip() and "## Root cause" in done["summary"]
        assert 'make_worktree(case_id="' in done["next_step"] and 'action="remove"' in done["next_step"]
        status = await ok(client, "get_workflow", **args)
        assert all(step(status, s) in ("done", "waived", "agent") for s in
                   ("environment", "reproduce", "reduce", "test", "main_check", "logs", "classify", "verify",
                    "review", "celebrate"))

        # Clean up the server's worktree; the checkout itself stays as the agent left it.
        await ok(client, "make_worktree", **args, action="remove", ref="main")
    assert git(checkout, "worktree", "list").count("\n") == 1
    assert git(checkout, "rev-parse", "--abbrev-ref", "HEAD").strip() == "fix"
