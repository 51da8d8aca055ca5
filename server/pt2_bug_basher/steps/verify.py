"""Step 11: the registered test and nearby tests, on the current code; verification when they pass."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import anyio
from pydantic import BaseModel, Field, PrivateAttr

from pt2_bug_basher.case.paths import confine
from pt2_bug_basher.case.store import CaseRecord
from pt2_bug_basher.case.workflow import Workflow
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import BugBasherError, GateClosed, InvalidInput
from pt2_bug_basher.domain.evidence import (
    ArtifactsEvidence,
    LogsEvidence,
    MainCheckEvidence,
    ReduceEvidence,
    ReproduceEvidence,
    SweepEvidence,
    SweepSampleRecord,
    TestEvidence,
    TestOutcomeRecord,
    VerifyEvidence,
)
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.cpus import xdist_workers
from pt2_bug_basher.execution.pytest import nearby as near
from pt2_bug_basher.execution.pytest import session
from pt2_bug_basher.execution.pytest.nearby import NearbyTest
from pt2_bug_basher.execution.pytest.results import FailureInfo, PytestReport, analyse
from pt2_bug_basher.execution.runs import ProgressFn, check_timeout
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.execution.sweep import SampleResult, SweepComparison, SweepRun
from pt2_bug_basher.steps._registered import qualified_name, registered_test

MAX_TESTS = 200
SHOWN_PASSED = 30
SHOWN_FAILED = 10
SHOWN_NEARBY = 15
RUN_NEARBY_LIMIT = 30
COLLECT_TIMEOUT_S = 600.0
SWEEP_NEARBY_BELOW = 5  # the sweep is on by default when fewer nearby tests than this were found
SWEEP_BUDGET_S = 180.0
SHOWN_SWEEP = 5
MAX_SOURCE_BYTES = 256 * 1024
MAX_GRAPH_FILES = 40


class CollectionError(BaseModel):
    file: str
    message: str


class SkippedTest(BaseModel):
    node_id: str
    reason: str


class RunTestsResult(BaseModel):
    case_id: str
    where: str
    counts: dict[str, int] = Field(description="passed, failed, errored, skipped, collection_errors")
    registered: str = Field(description="the registered test and its outcome")
    passed: list[str] = Field(default_factory=list, description=f"passed node ids (first {SHOWN_PASSED})")
    failed: list[FailureInfo] = Field(default_factory=list, description="failures and errors, with category and frame")
    skipped: list[SkippedTest] = Field(default_factory=list)
    collection_errors: list[CollectionError] = Field(default_factory=list)
    nearby: list[NearbyTest] = Field(default_factory=list, description="existing tests near the registered one")
    nearby_keywords: list[str] = Field(default_factory=list, description="-k keywords from the changed functions")
    verified: bool = Field(description="the verification step completed for the current state of the code")
    verification: str = Field(description="why verification did or did not complete")
    workers: int = Field(0, description="pytest-xdist workers used (0: serial)")
    run_ids: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    sweep: SweepEvidence | None = Field(None, description=(
        "the regression sweep: the case's ops' OpInfo samples (and its patterns' programs) compiled against eager "
        f"on the fix and on main; regressions (first {SHOWN_SWEEP}, each with a rerun command) block verification; "
        "the full table is the resource in `table`"))
    next_step: str
    _nearby_missing: bool = PrivateAttr(False)  # verification waits only for the nearby tests


@dataclass
class _Group:
    """One pytest run: selectors, an optional -k expression, an optional exact template (`only`)."""

    selectors: list[str]
    keyword: str | None = None
    only: str | None = None
    registered: bool = False
    """the registered test's variants: exactly the tests this run ran"""


class _Place(NamedTuple):
    """Where the tests run: pytest's rootdir, its working directory, and what the environment adds."""

    root: Path
    cwd: Path
    env_add: dict[str, str]


@dataclass
class _Ran:
    """What the groups' pytest runs found, merged: the tests, the registered test's node ids, the runs."""

    report: PytestReport = field(default_factory=PytestReport)
    registered_ids: set[str] = field(default_factory=set)
    run_ids: list[str] = field(default_factory=list)
    workers: int = 0
    usage: list[str] = field(default_factory=list)


async def run_tests(state: AppState, case_id: str, tests: list[str] | None = None, k: str | None = None,
                    where: str = "repo", timeout_s: float | None = None, run_nearby: bool | None = None,
                    sweep: bool | None = None, *, progress: ProgressFn | None = None) -> RunTestsResult:
    """Run the registered test (and the given, keyword-selected and nearby tests) and, on where="repo",
    record verification when they pass on the current state of the code. run_nearby=None: the nearby tests
    run on where="repo" (verification needs them), not on the worktree. sweep=None: the regression sweep runs
    on where="repo" when fewer than SWEEP_NEARBY_BELOW nearby tests were found."""
    if run_nearby is None:
        run_nearby = where == "repo"

    flow = await state.gate(ToolName.run_tests, case_id)
    case = flow.case
    registered = registered_test(flow)
    stopped = flow.stopped()
    if stopped and where == "repo":
        raise GateClosed(f"run_tests refused: the case is stopped — {stopped} (where=\"worktree\" still runs "
                         "tests in the worktree, to look into it)")
    repo = Path(case.repo).resolve()
    notes: list[str] = []
    place = _place(state, case, repo, registered, where, notes)
    explicit = [_selector(state, case, place.root, t) for t in (tests or [])]
    if len(explicit) > MAX_TESTS:
        raise InvalidInput(f"pass at most {MAX_TESTS} tests; use k=... to select many.")
    keyword = session.check_selector(k, "k") if k else None
    timeout = check_timeout(timeout_s)
    tree_before = await anyio.to_thread.run_sync(lambda: flow.tree_hash) if where == "repo" else None

    nearby, keywords = await _nearby(state, flow, repo, registered, notes, min(timeout, COLLECT_TIMEOUT_S), progress)
    groups = _groups(registered, explicit, keyword, nearby[:RUN_NEARBY_LIMIT] if run_nearby else [])
    ran = await _run_groups(state, case, groups, registered, place, timeout, progress)
    notes.extend(f"pytest: {u}" for u in ran.usage)

    if sweep is None:
        sweep = where == "repo" and len(nearby) < SWEEP_NEARBY_BELOW
    if sweep and where != "repo":
        raise InvalidInput("sweep=true runs on where=\"repo\" (it compares your tree with the worktree of main).")
    swept = await _sweep(state, flow, place.cwd, min(SWEEP_BUDGET_S, timeout / 2), progress, notes) if sweep else None
    result = _summarise(case_id, where, ran.report, registered, ran.registered_ids, nearby, keywords, ran.run_ids,
                        ran.workers, notes)
    result.sweep = swept
    if where == "repo":
        tree_after = await anyio.to_thread.run_sync(_tree_hash, case.repo)
        _record_verification(state, case_id, result, ran.report, registered, ran.registered_ids, nearby,
                             tree_before, tree_after)
    await _conclude(state, flow, result, ran, registered, where)
    return result


def _place(state: AppState, case: CaseRecord, repo: Path, registered: TestEvidence, where: str,
           notes: list[str]) -> _Place:
    """The repository (run from the registered test's directory) or the case's worktree of main."""
    from pt2_bug_basher.execution import worktrees

    if where == "worktree":
        record = worktrees.case_worktree(state.store, case)
        cwd, env_add, wt_notes = worktrees.run_environment(record)
        notes.extend(wt_notes)
        return _Place(Path(record.path), cwd, env_add)
    if where == "repo":
        cwd, repo_notes = session.repo_cwd(case, repo, registered.test_file)
        notes.extend(repo_notes)
        return _Place(repo, cwd, {})
    raise InvalidInput(f"where must be 'repo' or 'worktree', not {where!r}.")


def _groups(registered: TestEvidence, explicit: list[str], keyword: str | None,
            nearby: list[NearbyTest]) -> list[_Group]:
    """The pytest runs: the node ids (the registered test's, the given ones, the nearby tests to run), the
    given files under -k, and a generated registered test's variants by exact names."""
    groups: list[_Group] = []
    generated = bool(registered.keyword)
    node_selectors = [] if generated else [registered.node_id]
    node_selectors += [s for s in explicit if "::" in s or not keyword]
    node_selectors += [n.node_id for n in nearby]
    node_selectors = list(dict.fromkeys(node_selectors))
    if node_selectors:
        groups.append(_Group(node_selectors))
    if keyword:
        files = [s for s in explicit if "::" not in s] or [registered.test_file]
        groups.append(_Group(list(dict.fromkeys(files)), keyword=keyword))
    if generated:
        groups.append(_Group([registered.test_file], only=qualified_name(registered), registered=True))
    return groups


async def _run_groups(state: AppState, case: CaseRecord, groups: list[_Group], registered: TestEvidence,
                      place: _Place, timeout: float, progress: ProgressFn | None) -> _Ran:
    """Each group's pytest run, the tests merged (a node id counted once)."""
    python_workers: int | None = None  # probed once, only when a group selects several tests
    ran = _Ran(registered_ids={registered.node_id})
    for group in groups:
        selectors, kw = group.selectors, group.keyword
        # pytest-xdist for whole files, -k selections and long lists; the registered test's variants and a
        # few node ids run in one process (each xdist worker is a new interpreter that imports torch again).
        many = kw is not None or any("::" not in s for s in selectors) or len(selectors) > session.XDIST_MIN_TESTS
        if many and python_workers is None:
            python_workers = xdist_workers() if await session.has_xdist(state.store, case.python) else 0
        one = await session.run_pytest(state.store, case, selectors, cwd=place.cwd, rootdir=place.root, keyword=kw,
                                       only=group.only, env_add=place.env_add, tool=ToolName.run_tests.value,
                                       timeout_s=timeout, progress=progress,
                                       workers=(python_workers or 0) if many else 0,
                                       label=f"pytest ({len(selectors)} selectors{', -k ' + kw if kw else ''})")
        ran.run_ids.append(one.run_id)
        ran.workers = max(ran.workers, one.workers)
        if one.usage_error and not one.report.tests:
            ran.usage.append(one.usage_error)
        if group.registered:  # the registered test's variants: exactly the tests of this run
            ran.registered_ids |= {t.node_id for t in one.report.tests}
        seen = {t.node_id for t in ran.report.tests}
        ran.report.tests.extend(t for t in one.report.tests if t.node_id not in seen)
        ran.report.collection_errors.extend(one.report.collection_errors)
    return ran


async def _conclude(state: AppState, flow: Workflow, result: RunTestsResult, ran: _Ran, registered: TestEvidence,
                    where: str) -> None:
    """The next step: verification resting on the registered test alone says so; a stale earlier step first."""
    case_id = result.case_id
    result.next_step = _next(case_id, result, registered, where)
    if (result.verified and not result.nearby and not _swept(result.sweep)
            and all(t.node_id in ran.registered_ids for t in ran.report.tests)):
        result.next_step = _alone(case_id, flow) + result.next_step
    if result.verified:
        status = await state.status(case_id)
        stale = next((s for s in status.steps if s.status == "stale" and s.step != Step.review), None)
        if stale is not None:  # e.g. the test changed after the check on main: review would refuse
            result.next_step = (f"Verified, but an earlier step needs redoing before the review: step {stale.number} "
                                f"({stale.title}) is stale: {stale.tool_call}")


def _selector(state: AppState, case: CaseRecord, root: Path, test: str) -> str:
    session.check_selector(test, "test")
    file, sep, rest = test.partition("::")
    if root == Path(case.repo).resolve():
        path = state.confine(case, file, "test", base=root)
    else:
        path = confine(file, (root,), "test", base=root)  # a worktree: only inside it
    if not path.is_relative_to(root):
        raise InvalidInput(f"test {test!r} resolves to {path}, outside {root}.")
    if not path.exists():
        raise InvalidInput(f"test file {file!r} does not exist under {root}.")
    if rest and not all(part.replace("[", "").replace("]", "") for part in rest.split("::")):
        raise InvalidInput(f"test {test!r} is not a valid node id (file.py::Class::test_name).")
    return path.relative_to(root).as_posix() + sep + rest


def _tree_hash(repo: str) -> str:
    from pt2_bug_basher.execution.gitstate import tree_hash

    return tree_hash(Path(repo))


async def _nearby(state: AppState, flow: Workflow, repo: Path, registered: TestEvidence, notes: list[str],
                  timeout: float, progress: ProgressFn | None) -> tuple[list[NearbyTest], list[str]]:
    """Keywords from the functions the diff changes, and the collected tests that share them or sit
    beside the registered test (collected in the repository, as node ids that run as given)."""
    case = flow.case
    method = registered.method or registered.test_name.split(".")[-1]

    def plan() -> tuple[list[str], list[str], list[str]]:
        from pt2_bug_basher.execution import review
        from pt2_bug_basher.execution.pytest.static_checks import suggest_test_files
        from pt2_bug_basher.playbooks import layer_of

        keywords: list[str] = []
        main_check = flow.latest(Step.main_check)
        try:
            main_ref = review.main_ref_for(main_check.payload(MainCheckEvidence) if main_check else None)
            diff = review.diff_against(repo, main_ref)
            functions = near.changed_functions(repo, review.changed_source_lines(diff))
            keywords = near.keywords_for([f.name for f in functions])
        except BugBasherError as exc:
            notes.append(f"no diff against main for nearby tests: {exc}")
        repro = flow.latest_ok(Step.reproduce)
        category = (repro.payload(ReproduceEvidence).category if repro else None) or registered.category
        extra = suggest_test_files(repo, category, layer_of(state.store.localization(case.case_id))).present[:3]
        return keywords, extra, near.files_to_collect(repo, registered.test_file, keywords, extra)

    keywords, extra, files = await anyio.to_thread.run_sync(plan)
    cwd, _ = session.repo_cwd(case, repo, registered.test_file)
    collected = await session.collect(state.store, case, files, cwd=cwd, rootdir=repo,
                                      tool=ToolName.run_tests.value, timeout_s=timeout, progress=progress)
    if collected.parse_error:
        notes.append(f"nearby tests: collecting {', '.join(files)} failed: {collected.parse_error}")
    for error in collected.collection_errors[:3]:
        notes.append(f"nearby tests: pytest could not collect {error.node_id}: {error.message[:200]}")
    nearby = near.nearby_tests(collected.collected, registered.test_file, registered.class_name, method,
                               keywords, extra)
    if not nearby:
        searched = f"keywords {', '.join(keywords[:8])}" if keywords else "no keywords (the diff changes no function)"
        others = [t for t in collected.collected
                  if not near.is_registered(t, registered.test_file, registered.class_name, method)]
        found = (f"the {len(others)} other tests collected in {', '.join(files)} share none of {searched}"
                 if others else f"{', '.join(files)} holds no test but the registered one")
        notes.append(f"no nearby test: {found}, and none sits beside the registered test; name related tests in "
                     "tests=[...] if you know some")
    return nearby, keywords[:8]


def _registered_outcome(report: PytestReport, registered: TestEvidence, registered_ids: set[str]) -> str:
    """The registered node id's outcome; for a generated test not run by that id, its variants'."""
    exact = report.find(registered.node_id)
    if exact is not None:
        return exact.outcome
    outcomes = {t.outcome for t in report.tests if t.node_id in registered_ids}
    if not outcomes:
        return "not run"
    return "passed" if outcomes == {"passed"} else sorted(outcomes - {"passed"})[0]


def _summarise(case_id: str, where: str, report: PytestReport, registered: TestEvidence, registered_ids: set[str],
               nearby: list[NearbyTest], keywords: list[str], run_ids: list[str], workers: int,
               notes: list[str]) -> RunTestsResult:
    failed = report.by_outcome("failed") + report.by_outcome("error")
    infos = [analyse(t)[0] for t in failed[:SHOWN_FAILED]]
    reg = _registered_outcome(report, registered, registered_ids)
    counts = {"passed": len(report.by_outcome("passed")), "failed": len(report.by_outcome("failed")),
              "errored": len(report.by_outcome("error")), "skipped": len(report.by_outcome("skipped")),
              "collection_errors": len(report.collection_errors)}
    return RunTestsResult(
        case_id=case_id, where=where, counts=counts, registered=f"{registered.node_id}: {reg}",
        passed=[t.node_id for t in report.by_outcome("passed")][:SHOWN_PASSED], failed=infos,
        skipped=[SkippedTest(node_id=t.node_id, reason=t.message[:200]) for t in report.by_outcome("skipped")[:10]],
        collection_errors=[CollectionError(file=c.file, message=c.message[:500]) for c in report.collection_errors],
        nearby=nearby[:SHOWN_NEARBY], nearby_keywords=keywords, verified=False, verification="",
        workers=workers, run_ids=run_ids, notes=notes[:10], next_step="",
    )


def _record_verification(state: AppState, case_id: str, result: RunTestsResult, report: PytestReport,
                         registered: TestEvidence, registered_ids: set[str], nearby: list[NearbyTest],
                         before: str | None, after: str) -> None:
    reg = result.registered.rsplit(": ", 1)[-1]
    others = [t for t in report.tests if t.node_id not in registered_ids]
    problems = []
    missing_nearby = False
    if reg != "passed":
        problems.append(f"the registered test {registered.node_id} {reg}")
    if result.counts["failed"] or result.counts["errored"]:
        problems.append(f"{result.counts['failed']} failed and {result.counts['errored']} errored")
    if result.collection_errors:
        problems.append(f"{len(result.collection_errors)} test files could not be collected")
    if not problems and nearby and not any(t.outcome == "passed" for t in others) and not _swept(result.sweep):
        missing_nearby = True
        problems.append("no nearby test ran: run the suggested ones (run_nearby=true) or name them in tests/k")
    if result.sweep is not None and result.sweep.regression_count:
        first = result.sweep.regressions[0]
        problems.append(f"the regression sweep found {result.sweep.regression_count} samples that fail on the fix and "
                        f"pass on main, first {first.sample}: {first.message[:150]}")
    if before != after:
        result.verification = ("the code changed while the tests ran, so the result is not tied to one state of "
                               "the code; run again")
        return
    ok = not problems
    result._nearby_missing = missing_nearby
    outcomes = [TestOutcomeRecord(node_id=t.node_id, outcome=t.outcome) for t in report.tests[:200]]
    summary = (f"{result.counts['passed']} passed, {result.counts['failed']} failed, {result.counts['errored']} "
               f"errored, {result.counts['skipped']} skipped; registered test {reg}")
    if result.sweep is not None:
        summary += f"; sweep: {result.sweep.line()}"
    state.store.add_evidence(case_id, Step.verify.value, ok, summary, tree_hash=after, run_id=result.run_ids[0],
                             data=VerifyEvidence(registered=registered.node_id, registered_outcome=reg,
                                                 counts=result.counts, tests=outcomes, run_ids=result.run_ids,
                                                 problems=problems, sweep=result.sweep))
    result.verified = ok
    result.verification = ("verified on the current state of the code: " + summary) if ok else "; ".join(problems)


def _alone(case_id: str, flow: Workflow) -> str:
    """Verification that rests on the registered test alone says so, and how to see the fix where the user saw
    the bug: the repro, run as it is (its backend and settings, which the test may not share)."""
    reproduced = flow.latest_ok(Step.reproduce)
    script = reproduced.payload(ReproduceEvidence).script if reproduced is not None else None
    rerun = (" Run the repro as it is too (unless you have since the fix), which the test may not cover (its "
             "backend, mode and inputs): "
             + format_call(ToolName.run_with_logs, case_id=case_id, script=script, repeat=1) + ".") if script else ""
    return (f"Verified on the registered test alone: no nearby test ran (the notes say why), and no other test was "
            f"given.{rerun} Then: ")


def _next(case_id: str, result: RunTestsResult, registered: TestEvidence, where: str) -> str:
    call = format_call(ToolName.run_tests, case_id=case_id)
    nearby = format_call(ToolName.run_tests, case_id=case_id, run_nearby=True)
    if where == "worktree":
        return ("Ran in the worktree of main (this never completes verification). Verify your fix on your tree: "
                + nearby)
    if result.verified:
        return "Review the change: " + format_call(ToolName.review_changes, case_id=case_id)
    if result.collection_errors:
        first = result.collection_errors[0]
        return f"Fix the collection errors ({first.file}: {first.message[:150]}), then {nearby}"
    reg = result.registered.rsplit(": ", 1)[-1]
    if reg == "passed" and result.sweep is not None and result.sweep.regressions:
        broken = result.sweep.regressions[0]
        return (f"The fix breaks {result.sweep.regression_count} samples that pass on main, first {broken.sample} "
                f"({broken.message[:150]}); run it alone: `{broken.rerun}`. Fix that, then "
                + call)
    if reg != "passed":
        return (f"The registered test {registered.node_id} {reg}: the fix is not complete. Keep working on the "
                f"root cause, then {call}")
    if result.counts["failed"] or result.counts["errored"]:
        first_failure = result.failed[0] if result.failed else None
        where_ = f" ({first_failure.node_id}: {first_failure.message[:150]})" if first_failure else ""
        return (f"Nearby tests fail{where_}: the fix breaks something (or they failed before: check on main with "
                + format_call(ToolName.run_tests, case_id=case_id, tests=["<node ids>"], where="worktree")
                + f"). Then {nearby}")
    if result._nearby_missing:
        return f"Run the nearby tests too: {nearby}"
    return result.verification or nearby


def _swept(sweep: SweepEvidence | None) -> bool:
    """The sweep compared samples on the fix and on main: verification beyond the registered test."""
    return sweep is not None and sweep.compared_with_main and sweep.samples > 0


def _read(path: Path, limit: int = MAX_SOURCE_BYTES) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode(errors="replace")
    except OSError:
        return ""


def _sweep_inputs(state: AppState, flow: Workflow):  # -> CaseSweepInputs
    """What the case holds of its graphs and sources: the repro and its reduction, the debug artifacts' graphs
    and generated code, the logs run's output, and what localize varied."""
    from pt2_bug_basher.execution.sweep.plan import CaseSweepInputs
    from pt2_bug_basher.playbooks import layer_of

    case = flow.case
    inputs = CaseSweepInputs()
    repro = flow.latest_ok(Step.reproduce)
    if repro is not None and repro.payload(ReproduceEvidence).script:
        inputs.sources.append(_read(Path(repro.payload(ReproduceEvidence).script)))
    reduced = flow.latest_ok(Step.reduce)
    if reduced is not None and reduced.payload(ReduceEvidence).minimized_path:
        inputs.sources.append(_read(Path(reduced.payload(ReduceEvidence).minimized_path or "")))
    artifacts = flow.latest_ok(Step.artifacts)
    debug_dir = artifacts.payload(ArtifactsEvidence).debug_dir if artifacts is not None else None
    if debug_dir and Path(debug_dir).is_dir():
        files = sorted(p for p in Path(debug_dir).rglob("*") if p.suffix in (".py", ".txt") and p.is_file())
        inputs.graph_texts += [_read(p) for p in files[:MAX_GRAPH_FILES]]
    logs = flow.latest_ok(Step.logs)
    for run_id in (logs.payload(LogsEvidence).run_ids if logs is not None else [])[:3]:
        try:
            run = state.store.get_run(run_id, case.case_id)
        except BugBasherError:
            continue
        if run.stderr_path:
            inputs.graph_texts.append(_read(Path(run.stderr_path), 4 * MAX_SOURCE_BYTES))
    record = state.store.localization(case.case_id)
    if record is not None:
        inputs.layer, inputs.first_failing = layer_of(record), record.first_failing
        outcomes = {row.dynamic: row.outcome for row in record.table if row.backend == record.first_failing}
        inputs.localize_dynamic = len(set(outcomes.values())) > 1 and "True" in outcomes
    return inputs


async def _sweep(state: AppState, flow: Workflow, cwd: Path, budget_s: float, progress: ProgressFn | None,
                 notes: list[str]) -> SweepEvidence | None:
    """The case's sweep on the fix and, in the worktree of main, on main at once; None when it has no op."""
    import json

    from pt2_bug_basher.case.store import new_id
    from pt2_bug_basher.execution import worktrees
    from pt2_bug_basher.execution.cpus import parallel_runs
    from pt2_bug_basher.execution.sweep import TABLE_FILE, Target, case_launcher, compare, run_sweep, table_rows
    from pt2_bug_basher.execution.sweep.plan import case_spec

    case = flow.case
    inputs = await anyio.to_thread.run_sync(_sweep_inputs, state, flow)
    spec, why = case_spec(inputs)
    if not spec.ops and not spec.programs:
        notes.append("regression sweep: no op found in the case's sources, graphs or logs")
        return None
    main: Target | None = None
    try:
        record = worktrees.case_worktree(state.store, case)
        if record.torch_from_repo:
            wt_cwd, env_add, _ = worktrees.run_environment(record)
            main = Target("main", case.python, wt_cwd, env_add)
        else:
            why.append("main not swept: the case's torch is not imported from the repository")
    except BugBasherError as exc:
        why.append(f"main not swept: {exc}")
    stamp = new_id("sweep")
    scratch = state.store.case_dir(case.case_id) / "sweeps" / stamp
    launch = case_launcher(state.store, case, ToolName.run_tests.value)
    shards = max(1, parallel_runs(4) // (2 if main else 1))
    runs: dict[str, SweepRun] = {}

    async def side(target: Target) -> None:
        runs[target.label] = await run_sweep(spec, target, scratch_dir=scratch / target.label, launch=launch,
                                             budget_s=budget_s, shards=shards, progress=progress)

    async with anyio.create_task_group() as group:
        for target in (Target("fix", case.python, cwd), *([main] if main else [])):
            group.start_soon(side, target)
    fix = runs["fix"]
    comparison = compare(fix, runs["main"]) if main else None
    uri = f"case://{case.case_id}/sweeps/{stamp}"
    evidence = _sweep_evidence(fix, runs.get("main"), comparison, spec.backends[0], uri)
    evidence.notes = why + fix.problems + (runs["main"].problems if main else [])
    if fix.unknown_ops:
        evidence.notes.append(f"not in op_db (or random): {', '.join(dict.fromkeys(fix.unknown_ops))}")
    rows = table_rows(fix, runs.get("main"))
    await anyio.to_thread.run_sync(lambda: (scratch / TABLE_FILE).write_text(json.dumps(
        {"summary": evidence.line(), "notes": evidence.notes, "rows": rows}, indent=1)))
    return evidence


def _record(result: SampleResult, main: dict | None) -> SweepSampleRecord:
    other = main.get(result.key) if main else None
    return SweepSampleRecord(sample=result.key.describe(), outcome=result.outcome,
                             main_outcome=other.outcome if other else None, message=result.message[:300],
                             rerun=result.rerun, main_rerun=other.rerun if other else None)


def _sweep_evidence(fix: SweepRun, main: SweepRun | None, comparison: SweepComparison | None, backend: str,
                    uri: str) -> SweepEvidence:
    ran = [r for r in fix.results if r.outcome not in ("skip", "not_run")]
    theirs = {r.key: r for r in main.results} if main else None
    evidence = SweepEvidence(ops=fix.ops(), backend=backend, samples=len(ran), counts=fix.counts(),
                             main_counts=main.counts() if main else {}, compared_with_main=comparison is not None,
                             wall_s=fix.wall_s if main is None else max(fix.wall_s, main.wall_s), table=uri)
    if comparison is not None:
        evidence.regressions = [_record(r, theirs) for r in comparison.regressions[:SHOWN_SWEEP]]
        evidence.also_fixed = [_record(r, theirs) for r in comparison.also_fixed[:SHOWN_SWEEP]]
        evidence.pre_existing = [_record(r, theirs) for r in comparison.pre_existing[:SHOWN_SWEEP]]
        evidence.regression_count = len(comparison.regressions)
        evidence.also_fixed_count = len(comparison.also_fixed)
        evidence.pre_existing_count = len(comparison.pre_existing)
    else:
        evidence.failing = [_record(r, None) for r in ran if r.outcome in ("fail", "error", "timeout")][:SHOWN_SWEEP]
    return evidence
