"""`pt2-bug-basher triage SCRIPT`: what an agent runs first, as a readable report for a person.

Check the environment, reproduce twice, classify, rerun with the category's log preset.
The same core functions as the MCP tools; a case is opened in the store, so an agent can go on
from `next_steps`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from pt2_bug_basher.case.paths import within
from pt2_bug_basher.case.scripts import read_script, store_copy
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.case.workflow import Workflow
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.pytest.static_checks import suggest_test_files
from pt2_bug_basher.execution.repro import SILENT_LOGS, RunWithLogsResult
from pt2_bug_basher.execution.runs import DEFAULT_TIMEOUT_S
from pt2_bug_basher.playbooks import PLAYBOOKS, diagnostic_call
from pt2_bug_basher.steps.environment import CheckEnvResult, start_case
from pt2_bug_basher.steps.reproduce import localized_layer, run_and_record

DID_NOT_FAIL = ("The script did not fail: exit 0, no mismatch reported, no graph break or recompile limit in its "
                "logs, and the same with compilation off. Make it fail the way the bug does (backend, mode, dynamic, "
                "device, dtype; raise or assert on a wrong result), then triage it again.")


class TriageReport(BaseModel):
    category: str | None = Field(None, description="the failure's category; None when the script did not fail")
    confidence: float | None = None
    reproduced: bool = Field(False, description="it failed twice with the same signature")
    compiler_at_fault: bool | None = Field(None, description=(
        "True: passes with compilation off; False: fails without torch.compile too; None: not decided (a "
        "recompile or graph break, which compilation off can never show, stays None)"))
    evidence: list[str] = Field(default_factory=list, description="what decided the verdict: run ids and lines")
    advice: str | None = Field(None, description="why the method stops here, when it does")
    next_steps: list[str] = Field(default_factory=list,
                                  description="tool calls that go on from where triage left the case, in order")
    test_files: list[str] = Field(default_factory=list, description="topical test files for the category that exist "
                                                                    "in the repository")
    test_file_upstream: str | None = Field(None, description="NOT in the repository: upstream PyTorch's topical test "
                                                             "file, named when none of the category's exists here")
    env: CheckEnvResult
    reproduction: RunWithLogsResult | None = None
    with_logs: RunWithLogsResult | None = None


async def triage(
    store: Store, repo: Path, script: Path, conda_env: str | None = None, python: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S, say: Callable[[str], None] | None = None,
) -> TriageReport:
    tell: Callable[[str], None] = say or (lambda message: None)
    if not script.is_file():
        raise InvalidInput(f"{script} is not a file: pass the repro script to triage.")
    origin, copied = None, b""
    if not within(script.resolve(), (repo.resolve(), store.state_dir.resolve())):
        # outside the repository: the case keeps its own copy, which every later step finds
        origin = script.resolve()
        copied = read_script(origin)
    tell("checking the environment")
    env = await start_case(store, repo, conda_env=conda_env, python=python)
    report = TriageReport(env=env)
    if not env.ok or env.case_id is None:
        return report
    case = store.get_case(env.case_id)
    if origin is not None:
        script = store_copy(store.case_dir(case.case_id), origin.name, copied)

    async def progress(message: str) -> None:
        tell(message)

    tell(f"reproducing: running {script.name} twice")
    report.reproduction = await run_and_record(
        store, case, script, args=[], logs_spec=None, repeat=2, trace=False, env_add={}, timeout_s=timeout_s,
        cwd=None, progress=progress, main_check_done=False, tool="triage", origin=origin,
    )
    verdict = report.reproduction.verdict
    if verdict is not None:
        report.compiler_at_fault, report.evidence = verdict.compiler_at_fault, list(verdict.evidence)
        report.advice = verdict.advice
    failure = report.reproduction.failure
    if failure is None:
        report.reproduction.next_step = DID_NOT_FAIL
        return report
    report.category, report.confidence = failure.category, failure.confidence
    report.reproduced = report.reproduction.reproduced
    stopped = Workflow(store, case.case_id, lambda: "").user_error()
    if stopped is not None:
        report.advice = stopped
        report.next_steps = [format_call(ToolName.waive_step, case_id=case.case_id, step="reproduce",
                                         reason="<why the compiler is at fault after all>")]
        report.reproduction.next_step = stopped
        return report
    playbook = PLAYBOOKS.get(failure.category)
    if playbook is not None:
        homes = suggest_test_files(Path(case.repo), failure.category, localized_layer(store, case.case_id))
        report.test_files, report.test_file_upstream = homes.present, homes.upstream
    if playbook is not None and playbook.logs and not _logged_already(report.reproduction, playbook.logs):
        tell(f"rerunning with TORCH_LOGS={playbook.logs}")
        report.with_logs = await run_and_record(
            store, case, script, args=[], logs_spec=playbook.logs, repeat=1, trace=False, env_add=dict(playbook.env),
            timeout_s=timeout_s, cwd=None, progress=progress, main_check_done=False, tool="triage",
            inductor_config=dict(playbook.inductor_config),
        )
    report.next_steps = next_steps(report)
    if report.next_steps:
        report.reproduction.next_step = report.next_steps[0]
        if report.with_logs is not None:
            report.with_logs.next_step = report.next_steps[0]
    return report


def _logged_already(reproduction: RunWithLogsResult, preset_logs: str) -> bool:
    """The reproduction's own reruns of a script that exited 0 already logged everything the preset asks for."""
    if not reproduction.logged_runs:
        return False
    return set(preset_logs.split(",")) <= set(SILENT_LOGS.split(","))


def next_steps(report: TriageReport) -> list[str]:
    """The calls that go on from where triage left the case; never one that repeats what triage did."""
    repro = report.reproduction
    if repro is None or repro.failure is None:
        return []
    case_id, script, category = repro.case_id, repro.script, repro.failure.category
    if not repro.reproduced:
        return [format_call(ToolName.run_with_logs, case_id=case_id, script=script, repeat=3)]
    steps = []
    playbook = PLAYBOOKS.get(category) or PLAYBOOKS["unknown"]
    logged = report.with_logs is not None or bool(playbook.logs and _logged_already(repro, playbook.logs))
    if not (playbook.diagnostic.tool == ToolName.run_with_logs and logged):
        steps.append(diagnostic_call(category, case_id, script))  # the preset's logs were just collected
    if playbook.diagnostic.tool != ToolName.localize:
        # step 3 starts with the backend ladder: it says which layer fails, and which minifier fits
        steps.append(format_call(ToolName.localize, case_id=case_id, script=script))
    if playbook.diagnostic.tool != ToolName.minify:
        steps.append(format_call(ToolName.minify, case_id=case_id, script=script, mode="auto"))
    topical = report.test_files[0] if report.test_files else "test/<area>/test_<topic>.py"
    steps.append(format_call(ToolName.register_test, case_id=case_id,
                             test_file=f"<{topical} or another topical test file>",
                             test_name="<TestClass.test_name>"))
    return steps
