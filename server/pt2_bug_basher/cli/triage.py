"""`pt2-bug-basher triage SCRIPT`: what an agent runs first, as a readable report for a person.

Check the environment, reproduce twice, classify, rerun with the category's log preset.
The same core functions as the MCP tools; a case is opened in the store, so an agent can go on
from `next_steps`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from pt2_bug_basher.case.store import Store
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.repro import RunWithLogsResult
from pt2_bug_basher.execution.runs import DEFAULT_TIMEOUT_S
from pt2_bug_basher.playbooks import PLAYBOOKS, diagnostic_call
from pt2_bug_basher.steps.environment import CheckEnvResult, start_case
from pt2_bug_basher.steps.reproduce import run_and_record


class TriageReport(BaseModel):
    category: str | None = Field(None, description="the failure's category; None when the script did not fail")
    confidence: float | None = None
    reproduced: bool = Field(False, description="it failed twice with the same signature")
    next_steps: list[str] = Field(default_factory=list,
                                  description="tool calls that go on from where triage left the case, in order")
    test_files: list[str] = Field(default_factory=list, description="topical test files for the category")
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
    tell("checking the environment")
    env = await start_case(store, repo, conda_env=conda_env, python=python)
    report = TriageReport(env=env)
    if not env.ok or env.case_id is None:
        return report
    case = store.get_case(env.case_id)

    async def progress(message: str) -> None:
        tell(message)

    tell(f"reproducing: running {script.name} twice")
    report.reproduction = await run_and_record(
        store, case, script, args=[], logs_spec=None, repeat=2, trace=False, env_add={}, timeout_s=timeout_s,
        cwd=None, progress=progress, main_check_done=False, tool="triage",
    )
    failure = report.reproduction.failure
    if failure is None:
        return report
    report.category, report.confidence = failure.category, failure.confidence
    report.reproduced = report.reproduction.reproduced
    playbook = PLAYBOOKS.get(failure.category)
    if playbook is not None:
        report.test_files = list(playbook.test_files)
        tell(f"rerunning with TORCH_LOGS={playbook.logs}")
        report.with_logs = await run_and_record(
            store, case, script, args=[], logs_spec=playbook.logs, repeat=1, trace=False, env_add=dict(playbook.env),
            timeout_s=timeout_s, cwd=None, progress=progress, main_check_done=False, tool="triage",
            inductor_config=dict(playbook.inductor_config),
        )
    report.next_steps = next_steps(report)
    return report


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
    if not (playbook.diagnostic.tool == ToolName.run_with_logs and report.with_logs is not None):
        steps.append(diagnostic_call(category, case_id, script))  # the preset's logs were just collected
    if playbook.diagnostic.tool != ToolName.minify:
        steps.append(format_call(ToolName.minify, case_id=case_id, script=script, mode="auto"))
    topical = playbook.test_files[0] if playbook.test_files else "test/<area>/test_<topic>.py"
    steps.append(format_call(ToolName.register_test, case_id=case_id,
                             test_file=f"<{topical} or another topical test file>",
                             test_name="<TestClass.test_name>"))
    return steps
