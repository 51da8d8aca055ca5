"""`pt2-bug-basher triage SCRIPT`: what an agent runs first, as a readable report for a person.

Check the environment, reproduce twice, classify, rerun with the category's log preset.
The same core functions as the MCP tools; a case is opened in the store, so an agent can go on.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from pt2_bug_basher.case.store import Store
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.execution.repro import RunWithLogsResult
from pt2_bug_basher.execution.runs import DEFAULT_TIMEOUT_S
from pt2_bug_basher.playbooks import diagnostic_call, guide
from pt2_bug_basher.steps.environment import CheckEnvResult, start_case
from pt2_bug_basher.steps.reproduce import run_and_record


class TriageReport(BaseModel):
    env: CheckEnvResult
    reproduction: RunWithLogsResult | None = None
    with_logs: RunWithLogsResult | None = None


async def triage(
    store: Store, repo: Path, script: Path, conda_env: str | None = None, python: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S, say=None,
) -> TriageReport:
    say = say or (lambda message: None)
    if not script.is_file():
        raise InvalidInput(f"{script} is not a file: pass the repro script to triage.")
    say("checking the environment")
    env = await start_case(store, repo, conda_env=conda_env, python=python)
    report = TriageReport(env=env)
    if not env.ok or env.case_id is None:
        return report
    case = store.get_case(env.case_id)

    async def progress(message: str) -> None:
        say(message)

    say(f"reproducing: running {script.name} twice")
    report.reproduction = await run_and_record(
        store, case, script, args=[], logs_spec=None, repeat=2, trace=False, env_add={}, timeout_s=timeout_s,
        cwd=None, progress=progress, main_check_done=False, tool="triage",
    )
    failure = report.reproduction.failure
    if failure is None:
        return report
    from pt2_bug_basher.analysis.torch_logs import PRESETS

    spec = PRESETS.get(failure.category)
    if spec:
        say(f"rerunning with TORCH_LOGS={spec}")
        report.with_logs = await run_and_record(
            store, case, script, args=[], logs_spec=spec, repeat=1, trace=False, env_add={}, timeout_s=timeout_s,
            cwd=None, progress=progress, main_check_done=False, tool="triage",
        )
    return report


def format_report(report: TriageReport) -> str:
    from pt2_bug_basher.cli.main import format_env_report

    out = ["== Environment", format_env_report(report.env)]
    repro = report.reproduction
    if repro is None:
        return "\n".join(out)
    out.append("\n== Reproduction")
    for run in repro.runs:
        out.append(f"  {run.run_id}: {run.exit} in {run.duration_s:.1f}s" + ("  (failed)" if run.failed else ""))
    if not any(r.failed for r in repro.runs):
        out.append("  The script did not fail.")
        out.append(f"\nNext: {repro.next_step or 'make the script fail the way the bug does'}")
        return "\n".join(out)
    out.append("  Same failure every time: " + ("yes" if repro.reproduced else "NO (flaky or varying)"))
    f = repro.failure
    if f is not None:
        out.append("\n== Failure")
        out.append(f"  Category   : {f.category}" + (f" (also {', '.join(f.secondary)})" if f.secondary else "")
                   + f", confidence {f.confidence:.2f}")
        if f.exception_type:
            out.append(f"  Exception  : {f.exception_type}: {(f.message or '').splitlines()[0] if f.message else ''}"[:300])
        if f.user_frame:
            out.append(f"  User code  : {f.user_frame}")
        if f.torch_frame:
            out.append(f"  In torch   : {f.torch_frame}")
        out.append(f"  Signature  : {f.signature}")
        if f.evidence:
            out.append("  Evidence   :")
            out += [f"    {line}" for line in f.evidence]
    logs = report.with_logs or repro
    if logs.graph_breaks:
        out.append(f"\n== Graph breaks ({logs.graph_break_total} in all)")
        out += [f"  {b.count}x {b.location or '?'}: {b.reason.splitlines()[0][:200]}" for b in logs.graph_breaks]
    if logs.recompiles:
        out.append("\n== Recompiles")
        out += [f"  {r.count}x {r.function or '?'}: {r.reason.splitlines()[0][:200]}" for r in logs.recompiles]
    if report.with_logs is not None:
        out.append(f"\n== Logs: TORCH_LOGS={report.with_logs.env_added.get('TORCH_LOGS')}")
        out.append(f"  full stderr: {report.with_logs.runs[0].stderr}")
    if f is not None:
        case_id = repro.case_id
        g = guide(f.category)
        steps = [diagnostic_call(f.category, case_id, repro.script)]
        if report.with_logs is not None and steps[0].startswith("run_with_logs("):
            steps = []  # the logs were just collected above
        steps.append(f'minify(case_id="{case_id}", script="{repro.script}", mode="auto")')
        steps.append("write a failing test in one of: " + (", ".join(g.test_files) or "a topical test file")
                     + f', then register_test(case_id="{case_id}", ...)')
        out.append("\n== Next steps")
        out += [f"  {n}. {step}" for n, step in enumerate(steps, 1)]
        out.append(f"  Case {case_id} is open: an agent can continue it with the MCP tools "
                   "(pt2-bug-basher serve).")
    return "\n".join(out)
