"""Step 6 (logs): the TORCH_LOGS a run asks for (a spec or a category preset) and the evidence it gives."""

from __future__ import annotations

from dataclasses import dataclass, field

from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.domain.evidence import LogsEvidence
from pt2_bug_basher.domain.names import Step
from pt2_bug_basher.execution.repro import RunWithLogsResult


@dataclass(frozen=True)
class LogsRequest:
    spec: str | None = None
    """the TORCH_LOGS value, checked against the names the case's torch registers"""
    env: dict[str, str] = field(default_factory=dict)
    """environment additions: the preset's, then the caller's (which win)"""
    inductor_config: dict[str, object] = field(default_factory=dict)


def resolve(case: CaseRecord, logs: str | None, env_add: dict[str, str]) -> LogsRequest:
    """What `logs` asks for: a TORCH_LOGS spec, or a preset that also sets what its category's diagnosis needs."""
    if not logs:
        return LogsRequest(env=env_add)
    from pt2_bug_basher.analysis.torch_logs import NAMES_URI, PRESET_ENV, PRESET_INDUCTOR_CONFIG, resolve_logs

    torch_info = case.env.get("torch") or {}
    spec = resolve_logs(logs, torch_info.get("log_components", []), torch_info.get("log_artifacts", []),
                        names_at=NAMES_URI.format(case_id=case.case_id))
    return LogsRequest(spec=spec, env={**PRESET_ENV.get(logs, {}), **env_add},
                       inductor_config=dict(PRESET_INDUCTOR_CONFIG.get(logs, {})))


def record(store: Store, case: CaseRecord, result: RunWithLogsResult, spec: str | None, main_check_done: bool) -> None:
    """Logs count for step 6 once the main check is done, and only from runs that failed."""
    if not spec or not main_check_done or not any(r.failed for r in result.runs):
        return
    counts = [f"{result.graph_break_total} graph breaks", f"{sum(r.count for r in result.recompiles)} recompiles"]
    if result.graphs_compiled is not None:  # only when the logs report it
        counts.append(f"{result.graphs_compiled} graphs")
    summary = f"TORCH_LOGS={spec}: " + ", ".join(counts)
    run_ids = [r.run_id for r in result.runs]
    store.add_evidence(case.case_id, Step.logs.value, True, summary, run_id=run_ids[0],
                       data=LogsEvidence(logs=spec, run_ids=run_ids, script=result.script))
    result.recorded.append(Step.logs.value)


def preset_for(category: str, layer: str | None = None) -> str:
    """The logs preset of the playbook for a failure category (following localize's layer), or the general one."""
    from pt2_bug_basher.playbooks import log_preset

    return log_preset(category, layer)
