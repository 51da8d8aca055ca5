"""Hostile input for every tool, past the gates: generated arguments are answered with a tool error
or a valid result, the server stays up, and nothing outside the allowed roots is written or run in place
(a .py file there runs only from the copy a case keeps of it).

Arguments are generated from each tool's own input schema (tools/list), with hostile values mixed
in: huge and empty strings, unicode, NUL bytes, `..` and symlinks escaping the allowed roots, refs
beginning with `-`, absurd numbers, unknown and real case ids. Each gated tool gets a case of its
own that already holds the evidence its gate requires (seeded in the store as typed evidence), so
most calls reach the tool's own validation and confinement instead of stopping at the gate; a
tool's own results never touch another tool's case.

Runs stay cheap: every argument in seconds (timeouts, budgets) is always passed, hostile or short,
and the cases of the tools that would import torch on their default script (localize, minify)
reproduced with a script that is gone since, so only a hostile `script` naming the one-line
failing repro gets that far. PT2BB_FUZZ_EXAMPLES scales the examples per tool.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest_checkout import LARGE_TEST, seed_reproduction
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mcp import Client
from torch_checkout import add_test, git, make_mini_repo

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.store import Store, new_id
from pt2_bug_basher.case.workflow import TOOL_REQUIRES
from pt2_bug_basher.domain.evidence import (
    EnvironmentEvidence,
    MainCheckEvidence,
    ReviewEvidence,
    TestEvidence,
    TestOutcomeRecord,
    VerifyEvidence,
)
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.gitstate import tree_hash
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.server import create_server
from pt2_bug_basher.steps.environment import start_case

DEFAULT_EXAMPLES = 170
EXAMPLES = int(os.environ.get("PT2BB_FUZZ_EXAMPLES", str(DEFAULT_EXAMPLES)))
# Share of the examples for tools without a gate; check_env imports torch on most calls that pass validation.
UNGATED_SHARE = {ToolName.check_env.value: 0.03}
UNGATED_DEFAULT_SHARE = 0.3
# Calls past the gates, summed over the gated tools, at the default example count.
MIN_PAST_GATE = 1000
CALL_TIMEOUT_S = 120
SLOW_CALL_S = 2.0

GATE_REFUSALS = (" refused: step ", "the case is stopped")
TEST_FILE = "test/test_ops.py"
TEST_NAME = "TestOps.test_double_large"
NODE_ID = f"{TEST_FILE}::TestOps::test_double_large"
BOOM = "raise ValueError('boom')\n"
# Tools that import torch to run any script they are given (no timeout argument caps them): their
# case's reproduction script is gone, and the only script their arguments can name is the one-liner.
TORCH_ON_ANY_SCRIPT = {ToolName.localize.value, ToolName.minify.value}

# Beyond the gate: collect_debug_artifacts reruns the reproduction's script by default.
EXTRA_SEEDS = {ToolName.collect_debug_artifacts.value: (Step.reproduce,)}

REACHED: dict[str, int] = {}
CALLS: dict[str, int] = {}
SECONDS: dict[str, float] = {}


@dataclass
class Ready:
    tool: str
    case_id: str
    repo: Path
    run_ids: list[str] = field(default_factory=list)
    extra_paths: list[Path] = field(default_factory=list)


@dataclass
class Fuzz:
    server: Any
    tools: dict[str, Any]
    state_dir: Path
    outside: Path
    marker: Path
    ready: dict[str, Ready]
    blank_case: str
    stopped_case: str
    scratch: Ready


# -- the world ------------------------------------------------------------------------------------


# A script leaves its marker beside itself: run in place outside the roots, it writes EXECUTED there;
# the copy a case keeps of it (run_with_logs, localize, minify take a .py file from anywhere) writes
# beside the copy, inside the case's directory.
SECRET = ("import os\nopen(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'EXECUTED'), 'w').write('ran')\n"
          "raise SystemExit('must never run in place')\n")


def make_outside(outside: Path) -> Path:
    """A directory outside every allowed root; its files leave a marker there if they are ever run in place."""
    (outside / "secret.py").write_text(SECRET)
    # Named explicitly, pytest would collect it; it never matches a directory's collection.
    (outside / "secret_tests.py").write_text(SECRET + "\n\ndef test_x():\n    pass\n")
    return outside / "EXECUTED"


def make_repo(path: Path, outside: Path) -> Path:
    """The small package with its TestCase-derived test file (bug on main, HEAD on `work`), the one-line
    failing repro, and symlinks escaping to the outside directory, all committed."""
    make_mini_repo(path, bug_on="main")
    add_test(path, TEST_FILE, LARGE_TEST)
    (path / "boom.py").write_text(BOOM)
    (path / ".gitignore").write_text("__pycache__/\n")
    (path / "escape.py").symlink_to(outside / "secret.py")
    (path / "escape_dir").symlink_to(outside, target_is_directory=True)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "fixtures")
    return path


def snapshot(path: Path) -> list[tuple[str, int, int]]:
    """Every entry under path (not following symlinks), with size and modification time."""
    found = []
    for entry in sorted(path.rglob("*")):
        st_ = entry.lstat()
        found.append((str(entry.relative_to(path)), st_.st_size, st_.st_mtime_ns))
    st_ = path.lstat()
    return [(".", st_.st_size, st_.st_mtime_ns), *found]


def seed_step(store: Store, case_id: str, repo: Path, step: Step, script: str) -> None:
    """The evidence (or waiver) a step's tool would have recorded."""
    main = git(repo, "rev-parse", "main").strip()
    if step is Step.environment:
        store.add_evidence(case_id, step.value, True, f"seeded: {sys.executable}",
                           data=EnvironmentEvidence(python=sys.executable))
    elif step is Step.reproduce:
        seed_reproduction(store, case_id, repo, script)
    elif step is Step.reduce:
        store.add_waiver(case_id, step.value, "the repro is a single line already")
    elif step is Step.test:
        store.add_evidence(case_id, step.value, True, f"{TEST_NAME} fails (seeded)", tree_hash=tree_hash(repo),
                           data=TestEvidence(test_file=TEST_FILE, test_name=TEST_NAME, class_name="TestOps",
                                             method="test_double_large", node_id=NODE_ID, message="double() cannot "
                                             "take 21", category="unknown", exception_type="ValueError"))
    elif step is Step.main_check:
        store.add_evidence(case_id, step.value, True, f"{TEST_NAME} fails on main (seeded)",
                           data=MainCheckEvidence(ref="main", commit=main, node_id=NODE_ID, outcome="failed",
                                                  exception_type="ValueError", category="unknown"))
    elif step is Step.verify:
        store.add_evidence(case_id, step.value, True, "1 passed (seeded)", tree_hash=tree_hash(repo),
                           data=VerifyEvidence(registered=NODE_ID, registered_outcome="passed",
                                               counts={"passed": 1, "failed": 0, "errored": 0, "skipped": 0,
                                                       "collection_errors": 0},
                                               tests=[TestOutcomeRecord(node_id=NODE_ID, outcome="passed")]))
    elif step is Step.review:
        store.add_evidence(case_id, step.value, True, "no blocking finding (seeded)", tree_hash=tree_hash(repo),
                           data=ReviewEvidence(base=main, main_ref="main"))
    else:
        raise AssertionError(f"a gate now requires {step.value}: seed its evidence here")


def seed_run(store: Store, case_id: str, argv: list[str], cwd: Path) -> str:
    """A finished run as the server records it, with its logs under the case's directory."""
    run_id = new_id("run")
    run_dir = store.case_dir(case_id) / "runs" / run_id
    run_dir.mkdir(parents=True)
    stdout, stderr = run_dir / "stdout.log", run_dir / "stderr.log"
    stdout.write_text("")
    stderr.write_text("Traceback (most recent call last):\nValueError: boom\n")
    store.start_run(case_id, "run_with_logs", argv, str(cwd), {}, str(stdout), str(stderr), os.getpid(), run_id=run_id)
    store.finish_run(run_id, "exited", 1, None)
    return run_id


async def _list(server) -> dict[str, Any]:
    async with Client(server) as client:
        return {t.name: t for t in (await client.list_tools()).tools}


async def _ok(server, tool: str, **arguments) -> dict:
    async with Client(server) as client:
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, (tool, result.content[0].text if result.content else result)
    return result.structured_content


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory) -> Fuzz:
    root = tmp_path_factory.mktemp("fuzz")
    outside = tmp_path_factory.mktemp("outside")
    marker = make_outside(outside)
    repos = root / "repos"
    state_dir = root / "state"
    config = ServerConfig(state_dir=state_dir, default_repo=make_repo(repos / "default", outside),
                          allowed_roots=(repos,))
    store = Store(state_dir)
    # One real probe of this interpreter; every seeded case carries what it found.
    probed = anyio.run(lambda: start_case(store, config.default_repo, python=sys.executable))
    env = store.get_case(probed.case_id).env

    def new_case(repo: Path) -> str:
        return store.create_case(str(repo), sys.executable, env).case_id

    ready: dict[str, Ready] = {}
    for tool, steps in TOOL_REQUIRES.items():
        repo = make_repo(repos / tool.value, outside)
        case_id = new_case(repo)
        script = "boom.py"
        if tool.value in TORCH_ON_ANY_SCRIPT:
            (repo / "gone.py").write_text(BOOM)
            script = "gone.py"
        for step in (*steps, *EXTRA_SEEDS.get(tool.value, ())):
            seed_step(store, case_id, repo, step, script)
        (repo / "gone.py").unlink(missing_ok=True)
        ready[tool.value] = Ready(tool.value, case_id, repo)

    collect = ready[ToolName.collect_debug_artifacts.value]
    collect.run_ids = [seed_run(store, collect.case_id, [sys.executable, str(collect.repo / name)], collect.repo)
                       for name in ("boom.py", "escape.py", "gone.py")]
    collect.run_ids.append(seed_run(store, collect.case_id, [sys.executable, str(outside / "secret.py")], outside))

    blank_repo = make_repo(repos / "blank", outside)
    blank_case = new_case(blank_repo)  # no evidence at all: every gate refuses it
    stopped_case = new_case(blank_repo)
    for step in (Step.environment, Step.test):
        seed_step(store, stopped_case, blank_repo, step, "boom.py")
    store.add_evidence(stopped_case, Step.main_check.value, False, f"{TEST_NAME} PASSES on main (seeded)",
                       data=MainCheckEvidence(ref="main", node_id=NODE_ID, outcome="passed"))
    scratch = Ready("scratch", probed.case_id, config.default_repo)
    scratch.run_ids = list(collect.run_ids)

    state = AppState.open(config)
    for tool in TOOL_REQUIRES:
        anyio.run(state.gate, tool, ready[tool.value].case_id)  # raises if a seed no longer opens its gate

    server = create_server(config)
    # run_tests also runs in the case's worktree of main: one real main check creates it.
    tests_case = ready[ToolName.run_tests.value]
    checked = anyio.run(lambda: _ok(server, ToolName.make_worktree.value, case_id=tests_case.case_id, ref="main"))
    assert checked["ok"], checked
    worktree = Path(checked["worktree"])
    (worktree / "escape.py").symlink_to(outside / "secret.py")
    (worktree / "escape_dir").symlink_to(outside, target_is_directory=True)
    tests_case.extra_paths = [worktree, worktree / "escape_dir" / "secret_tests.py", worktree / "escape.py",
                              worktree / TEST_FILE]

    return Fuzz(server, anyio.run(_list, server), state_dir, outside, marker, ready, blank_case,
                stopped_case, scratch)


# -- argument strategies --------------------------------------------------------------------------


def hostile_strings(fz: Fuzz, tool: str, target: Ready) -> st.SearchStrategy[str]:
    repo = target.repo
    hostile = [
        "", " ", "\x00", "a\x00b", "x" * 100_000, "n" * 300, str(repo / ("n" * 300 + ".py")), "💥🔥",
        "\u202e\u0000\uffff", "../" * 40 + "etc/passwd", "/etc/passwd", "~/.ssh/id_rsa", "~nosuchuser/boom.py", "~",
        str(repo / ".." / ".." / "etc"), "../" + repo.name, str(repo / "escape.py"), "escape.py", "escape_dir",
        str(repo / "escape_dir" / "secret.py"), "escape_dir/secret_tests.py", "escape_dir/secret_tests.py::test_x",
        str(fz.outside / "secret.py"), str(fz.outside), str(fz.state_dir), str(fz.state_dir / "cases.sqlite3"),
        "-rf", "--output=/tmp/x", "--upload-pack=touch /tmp/pwned", "-", "HEAD~999", "refs/heads/../../x",
        "$(touch /tmp/pwned)", "`id`", "; rm -rf /", "+dynamo,nope", "all", "test/dynamo/test_misc.py",
        "case-00000000-deadbeef", "run-20000101-deadbeef", str(repo / "boom.py"), "boom.py",
        "The root cause: ../../etc/passwd; $(touch /tmp/pwned) `id` and \x00 in a long enough sentence.",
        "\x00" * 40, "💥" * 40, " " * 30 + "short",
    ]
    if tool in TORCH_ON_ANY_SCRIPT:  # files they can run stay rare: a localize run imports torch four times
        for runnable in (repo / "boom.py", fz.outside / "secret.py", repo / "escape_dir" / "secret.py"):
            hostile.remove(str(runnable))  # (a secret.py outside runs from the case's copy; escape.py stays)
    # What exists: reaching it takes a tool past its own checks (never a script that imports torch).
    real = ["main", "HEAD", "work", "pkg", "graph_break", "reduce", "environment", NODE_ID, TEST_NAME,
            "TestOps.test_halve", f"{TEST_FILE}::TestOps::test_halve", "test_double_large or test_halve",
            "not test_halve", fz.blank_case, target.case_id, *target.run_ids, *(str(p) for p in target.extra_paths)]
    if tool not in TORCH_ON_ANY_SCRIPT:
        real += [str(repo / "boom.py"), "boom.py", TEST_FILE, str(repo / TEST_FILE)]
    existing = st.sampled_from(real)
    return st.one_of(st.sampled_from(hostile), existing, existing, st.text(max_size=300),
                     st.text(min_size=20, max_size=400))


def described_values(schema: dict) -> list[str]:
    """Values a description names in quotes ('fx', 'source', ...): valid choices that are plain strings."""
    text = schema.get("description", "")
    return sorted(set(re.findall(r"'([^'\s]{1,80})'", text)))


HOSTILE_INTS = [0, -1, 1, 2, 8, 9, 10**12, -(10**12), 2**63]
HOSTILE_SECONDS = [0.0, -1.0, 1e-9, 1e12, -(10.0**12), 2.0**63]  # JSON has no inf or NaN: a client sends null
MIN_BUDGET_S = 5.0  # the smallest budget the reducers accept


def value_for(name: str, schema: dict, strings, defs: dict, depth: int = 0) -> st.SearchStrategy:
    if "$ref" in schema:
        return value_for(name, defs[schema["$ref"].rsplit("/", 1)[-1]], strings, defs, depth)
    if "anyOf" in schema:
        options = schema["anyOf"]
        if name.endswith("_s"):  # seconds: never left to the default (minutes)
            options = [s for s in options if s.get("type") != "null"]
        return st.one_of([value_for(name, s, strings, defs, depth) for s in options])
    if "enum" in schema:
        choices = st.sampled_from(schema["enum"])
        return st.one_of(choices, choices, strings)
    kind = schema.get("type")
    if kind == "string":
        hints = described_values(schema)
        return st.one_of(st.sampled_from(hints), st.sampled_from(hints), strings) if hints else strings
    if kind == "integer":
        return st.one_of(st.sampled_from(HOSTILE_INTS), st.integers())
    if kind == "number":
        if name.endswith("_s"):  # seconds: hostile, or short enough that nothing runs for long
            low = MIN_BUDGET_S if "budget" in name else 0.001
            return st.one_of(st.sampled_from(HOSTILE_SECONDS), st.floats(min_value=low, max_value=low + 0.25))
        return st.one_of(st.sampled_from(HOSTILE_SECONDS), st.floats())
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array" and depth < 2:
        return st.lists(value_for(name, schema.get("items", {}), strings, defs, depth + 1), max_size=5)
    if kind == "object" and depth < 2:
        return st.dictionaries(strings, strings, max_size=4)
    return st.one_of(strings, st.integers(), st.none())


def case_ids(fz: Fuzz, tool: str, target: Ready, strings) -> st.SearchStrategy[str]:
    """Mostly the tool's own ready case; sometimes a case its gate refuses, an unknown one or garbage."""
    others = [fz.blank_case, "case-00000000-deadbeef"]
    if tool in TOOL_REQUIRES and Step.test in TOOL_REQUIRES[ToolName(tool)]:
        others.append(fz.stopped_case)  # nothing these tools record can open another tool's gate on it
    hostile = st.one_of(st.sampled_from(others), strings)
    return st.integers(0, 99).flatmap(lambda n: st.just(target.case_id) if n < 90 else hostile)


def arguments_for(fz: Fuzz, tool, target: Ready) -> st.SearchStrategy[dict]:
    strings = hostile_strings(fz, tool.name, target)
    schema = tool.input_schema
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    defs = schema.get("$defs", {})

    def strategy(name: str, spec: dict) -> st.SearchStrategy:
        if name == "case_id":
            return case_ids(fz, tool.name, target, strings)
        return value_for(name, spec, strings, defs)

    seconds = {n: strategy(n, s) for n, s in props.items() if n.endswith("_s")}
    always = {n: strategy(n, s) for n, s in props.items() if n in required or n == "case_id"}
    maybe = {n: strategy(n, s) for n, s in props.items() if n not in always and n not in seconds}
    full = st.fixed_dictionaries({**always, **seconds}, optional=maybe)
    # Now and then only what is required (defaults everywhere else, so a call runs to the end more
    # often), or required arguments missing and one the tool does not have.
    lean = st.fixed_dictionaries({**always, **seconds})
    sparse = st.fixed_dictionaries(seconds, optional={**always, **maybe, "unexpected": strings})
    return st.integers(0, 19).flatmap(lambda n: sparse if n == 0 else lean if n <= 3 else full)


# -- the checks -----------------------------------------------------------------------------------


async def checked_call(client: Client, tool: str, arguments: dict) -> str:
    """'result', 'gate' (refused by the gate) or 'error' (a clean tool error past the gate)."""
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await client.call_tool(tool, arguments)
    if result.is_error:
        text = result.content[0].text
        assert text and "Traceback" not in text, text
        assert text != f"Error executing tool {tool}", f"unanticipated crash for {arguments!r}"
        refused = any(refusal in text for refusal in GATE_REFUSALS) or "unknown case_id" in text
        return "gate" if refused else "error"
    assert result.structured_content is not None, arguments
    assert result.structured_content.get("next_step"), result.structured_content
    return "result"


def examples_for(tool: str) -> int:
    if tool in {t.value for t in TOOL_REQUIRES}:
        return EXAMPLES
    return max(3, round(EXAMPLES * UNGATED_SHARE.get(tool, UNGATED_DEFAULT_SHARE)))


def min_past_gate() -> int:
    """Per gated tool, so that the module's total holds however the tests are spread over workers;
    scaled-down runs (few examples, mostly the simplest ones) only need half their calls past."""
    if EXAMPLES >= DEFAULT_EXAMPLES:
        return math.ceil(MIN_PAST_GATE / len(TOOL_REQUIRES))
    return EXAMPLES // 2


@pytest.mark.parametrize("tool_name", [t.value for t in ToolName])
def test_every_tool_survives_hostile_arguments(fuzz: Fuzz, tool_name: str):
    if tool_name not in fuzz.tools:
        pytest.skip(f"{tool_name} is not served by this installation")
    tool = fuzz.tools[tool_name]
    gated = ToolName(tool_name) in TOOL_REQUIRES
    target = fuzz.ready.get(tool_name, fuzz.scratch)
    outside_before = snapshot(fuzz.outside)
    outcomes: dict[str, int] = {}
    slow: set[str] = set()
    started = time.monotonic()

    @settings(max_examples=examples_for(tool_name), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(arguments_for(fuzz, tool, target))
    def check(arguments):
        async def call():
            async with Client(fuzz.server) as client:
                outcome = await checked_call(client, tool_name, arguments)
                assert (await client.list_tools()).tools  # the server is still up and answering
            return outcome

        key = json.dumps(arguments, sort_keys=True)
        assume(key not in slow)  # hypothesis draws the same call again now and then: a slow one runs once
        started_call = time.monotonic()
        outcome = anyio.run(call)
        if time.monotonic() - started_call > SLOW_CALL_S:
            slow.add(key)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if gated and arguments.get("case_id") == target.case_id:
            # Nothing a tool records on its own case closes its gate again.
            assert outcome != "gate", f"{tool_name} refused its ready case for {arguments!r}"
            REACHED[tool_name] = REACHED.get(tool_name, 0) + 1
        CALLS[tool_name] = CALLS.get(tool_name, 0) + 1

    check()
    SECONDS[tool_name] = time.monotonic() - started
    # Nothing outside the allowed roots ran in place or was written.
    assert not fuzz.marker.exists(), "a file outside the allowed roots was executed in place"
    assert snapshot(fuzz.outside) == outside_before
    assert not Path("/tmp/pwned").exists()
    past = f", {REACHED.get(tool_name, 0)} past the gate" if gated else ""
    print(f"\n{tool_name}: {CALLS.get(tool_name, 0)} calls{past}, {outcomes}, {SECONDS[tool_name]:.1f}s")
    if gated:
        assert REACHED.get(tool_name, 0) >= min_past_gate(), (tool_name, REACHED.get(tool_name, 0), outcomes)


def test_calls_reached_past_the_gates():
    """The module's total, when every gated tool ran in this process (per-tool floors cover the rest)."""
    gated = {t.value for t in TOOL_REQUIRES}
    if not gated <= CALLS.keys():
        pytest.skip("not every gated tool ran in this process; each one's own floor was checked")
    total = sum(REACHED.get(t, 0) for t in gated)
    print("\n" + "\n".join(f"{t}: {REACHED.get(t, 0)}/{CALLS[t]} past the gate, {SECONDS.get(t, 0):.1f}s"
                           for t in sorted(gated)))
    print(f"total past the gates: {total}; ungated calls: {sum(CALLS[t] for t in CALLS.keys() - gated)}")
    if EXAMPLES >= DEFAULT_EXAMPLES:
        assert total >= MIN_PAST_GATE
