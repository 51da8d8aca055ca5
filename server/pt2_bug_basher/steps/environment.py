"""Step 1 (check_env): resolve the interpreter, import torch there, open a case."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.torch_logs import NAMES_URI
from pt2_bug_basher.case.paths import confine
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import EnvironmentEvidence
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.environment import (
    DEFAULT_PROBE_TIMEOUT_S,
    EnvFacts,
    EnvReport,
    TorchBasics,
    active_environment,
    probe,
    resolve_interpreter,
)
from pt2_bug_basher.execution.runs import ProgressFn, ignore_progress
from pt2_bug_basher.execution.state import AppState


class EnvironmentChoice(BaseModel):
    conda_env: str = Field("", description="name of the conda env or virtualenv (leave empty to give a path)")
    python: str = Field("", description="full path of the Python interpreter (leave empty to give an env name)")


AskEnvironment = Callable[[], Awaitable[EnvironmentChoice | None]]
"""Asks the user which environment reproduces the failure; None when there is no answer."""


class TorchLogNames(BaseModel):
    components: int = Field(description="how many TORCH_LOGS components this torch registers")
    artifacts: int = Field(description="how many TORCH_LOGS artifacts this torch registers")
    resource: str | None = Field(None, description="the resource listing every name and the presets "
                                                   "(read it with resources/read)")


class TorchSummary(TorchBasics):
    torch_logs: TorchLogNames


class CheckEnvResult(EnvFacts):
    torch: TorchSummary | None = None
    case_id: str | None = Field(None, description="the new case; every stateful tool takes it")
    next_step: str


def _result(report: EnvReport, case_id: str | None, next_step: str) -> CheckEnvResult:
    """The report for the agent: the TORCH_LOGS names counted, with the resource that lists them."""
    torch = None
    if report.torch is not None:
        t = report.torch
        torch = TorchSummary(**t.model_dump(exclude={"log_components", "log_artifacts"}), torch_logs=TorchLogNames(
            components=len(t.log_components), artifacts=len(t.log_artifacts),
            resource=NAMES_URI.format(case_id=case_id) if case_id else None))
    return CheckEnvResult(**report.model_dump(exclude={"torch"}), torch=torch, case_id=case_id, next_step=next_step)


def needs_asking(conda_env: str | None, python: str | None) -> bool:
    """No environment named and none active: only the user can say which one reproduces the failure."""
    return not conda_env and not python and active_environment(dict(os.environ)) is None


async def check_env(
    state: AppState, conda_env: str | None = None, python: str | None = None, repo: str | None = None, *,
    ask: AskEnvironment | None = None, progress: ProgressFn | None = None,
) -> CheckEnvResult:
    """Find the interpreter (asking the user through `ask` when nothing names one), probe torch, open a case."""
    progress = progress or ignore_progress
    repo_path = confine(repo or str(state.config.default_repo), state.config.allowed_roots, "repo")
    if not repo_path.is_dir():
        raise InvalidInput(f"repo {repo_path} is not a directory. Pass the path of the repository being fixed.")
    if ask is not None and needs_asking(conda_env, python):
        choice = await ask()
        if choice is not None:
            conda_env, python = choice.conda_env or None, choice.python or None
    await progress("importing torch in the target interpreter")
    result = await start_case(state.store, repo_path, conda_env=conda_env, python=python)
    await progress("done")
    return result


async def start_case(
    store: Store,
    repo: Path,
    conda_env: str | None = None,
    python: str | None = None,
    environ: dict[str, str] | None = None,
    timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
) -> CheckEnvResult:
    """Resolve the interpreter, probe it, and open a case (with its environment evidence) when torch imports."""
    # Naming a conda env may run `conda info --envs`: a subprocess, kept off the event loop.
    interp = await anyio.to_thread.run_sync(resolve_interpreter, conda_env, python, environ)
    scratch = store.state_dir / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    report = await probe(interp, repo, scratch, timeout_s)
    if not report.ok or report.torch is None:
        return _result(report, None, (
            "torch cannot be imported in this interpreter. Fix the environment (or ask the user which "
            "one to use) and call check_env again with conda_env=NAME or python=PATH."
        ))
    case = store.create_case(str(repo), report.python, report.model_dump())
    summary = f"torch {report.torch.version} imports in {report.python} ({report.rule})"
    store.add_evidence(case.case_id, Step.environment.value, True, summary,
                       data=EnvironmentEvidence(python=report.python))
    next_step = "Reproduce the failure twice: " + format_call(ToolName.run_with_logs, case_id=case.case_id,
                                                               script="<repro.py>", repeat=2)
    if report.ask_user:
        next_step = f"First ask the user: {report.ask_user} Then: {next_step}"
    return _result(report, case.case_id, next_step)
