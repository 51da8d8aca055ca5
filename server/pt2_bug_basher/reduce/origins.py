"""Where what an exception used came from, when its maker is no longer on the stack: the repro run once more
at the first failing backend under one of the spectrum probe's recorders.
- A None: the compiler functions that returned a None of their own (`return None`, a bare return, the end of
  the body) before the exception. Asked for when the exception says it used a None: the function that made the
  None is more often the bug than the one that used it.
- FX-generated code: which functions of torch/fx wrote each fragment of the code that raised. Asked for when
  the exception went through such code, or bound its arguments wrong calling it.
- Dynamo's internal frames, which it leaves out of the traceback it prints unless TORCHDYNAMO_VERBOSE=1."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from pt2_bug_basher.analysis.compare import RERUN_OR_ACCURACY, run_failure, same_failure
from pt2_bug_basher.analysis.spectra import Spectrum
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.execution.runs import ProgressFn, execute, with_spectrum
from pt2_bug_basher.execution.warm import WarmRequest
from pt2_bug_basher.reduce.ladder import rung_argv
from pt2_bug_basher.reduce.variants import read_spectrum


@dataclass
class NoneReturns:
    """What the run recorded, when it failed the case's way: the returns (most recent first) and its spectrum."""

    root: Path | None = None  # the folder that holds the case's torch package
    returns: list[dict] = field(default_factory=list)
    spectrum: Spectrum | None = None


@dataclass
class FxWriters:
    """What the run recorded, when it failed the case's way: the generated code that raised, its fragments and
    their writers (see _probes/spectrum.py), and its spectrum."""

    report: dict = field(default_factory=dict)
    spectrum: Spectrum | None = None
    errors: str = ""  # the run's stderr: FX prints the generated code's frames itself


async def _recording_run(store: Store, case: CaseRecord, ref_failure, ref_env: dict[str, str], ref_args: list[str],
                         script: Path, *, backend: str | None, timeout_s: float, limiter: anyio.CapacityLimiter,
                         progress: ProgressFn, what: str, name: str, flag: dict[str, bool]
                         ) -> tuple[dict | None, Spectrum | None, str]:
    """The repro once more at `backend` under the spectrum probe with one recorder on (`flag`); the probe's
    file, the run's spectrum and its stderr when it failed the case's way, else (None, None, "")."""
    folder = store.case_dir(case.case_id) / "origins"
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}-{backend or 'script'}.json"
    out.unlink(missing_ok=True)
    argv = rung_argv(case.python, script, ref_args, backend)
    async with limiter:
        await progress(f"localize: the repro once more, recording {what}")
        result = await execute(store, case, with_spectrum(store, argv, out, **flag), tool="localize",
                               cwd=script.parent, env_add=ref_env, timeout_s=timeout_s, progress=progress,
                               warm=WarmRequest(), label=f"localize: {what}")
    if not same_failure(run_failure(result), ref_failure, RERUN_OR_ACCURACY).level:
        return None, None, ""
    try:
        data = json.loads(out.read_text())
    except (OSError, ValueError):
        data = {}
    spectrum = read_spectrum(out, result.run_id, True, f"the repro, recording {what}")
    return (data if isinstance(data, dict) else {}), spectrum, result.stderr_text()


async def none_returns(store: Store, case: CaseRecord, ref_failure, ref_env: dict[str, str], ref_args: list[str],
                       script: Path, *, backend: str | None, timeout_s: float, limiter: anyio.CapacityLimiter,
                       progress: ProgressFn) -> NoneReturns:
    data, spectrum, _ = await _recording_run(
        store, case, ref_failure, ref_env, ref_args, script, backend=backend, timeout_s=timeout_s, limiter=limiter,
        progress=progress, what="which compiler functions returned a None", name="none-returns",
        flag={"none_returns": True})
    found = NoneReturns(spectrum=spectrum)
    if data is not None:
        returns, root = data.get("none_returns", []), data.get("torch")
        found.returns = [r for r in returns if isinstance(r, dict)] if isinstance(returns, list) else []
        found.root = Path(root) if isinstance(root, str) else None
    return found


async def fx_writers(store: Store, case: CaseRecord, ref_failure, ref_env: dict[str, str], ref_args: list[str],
                     script: Path, *, backend: str | None, timeout_s: float, limiter: anyio.CapacityLimiter,
                     progress: ProgressFn) -> FxWriters:
    data, spectrum, errors = await _recording_run(
        store, case, ref_failure, ref_env, ref_args, script, backend=backend, timeout_s=timeout_s, limiter=limiter,
        progress=progress, what="which functions of torch.fx wrote the generated code that raised",
        name="fx-writers", flag={"fx_writers": True})
    report = (data or {}).get("fx_code")
    return FxWriters(report=report if isinstance(report, dict) else {}, spectrum=spectrum, errors=errors)


# Dynamo's own hint that it left its internal frames out of the traceback it printed
STRIPPED = "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace"
VERBOSE_ENV = {"TORCHDYNAMO_VERBOSE": "1"}


async def internal_stack(store: Store, case: CaseRecord, ref_failure, ref_env: dict[str, str], ref_args: list[str],
                         script: Path, *, backend: str | None, timeout_s: float, limiter: anyio.CapacityLimiter,
                         progress: ProgressFn) -> str | None:
    """The repro once more at `backend` with Dynamo's internal stack trace on (what its hint asks for): the
    run's stderr when it failed the case's way, else None."""
    argv = rung_argv(case.python, script, ref_args, backend)
    async with limiter:
        await progress("localize: the repro once more with TORCHDYNAMO_VERBOSE=1, for the frames Dynamo left out")
        result = await execute(store, case, argv, tool="localize", cwd=script.parent,
                               env_add={**ref_env, **VERBOSE_ENV}, timeout_s=timeout_s, progress=progress,
                               warm=WarmRequest(), label="localize: Dynamo's internal stack")
    if not same_failure(run_failure(result), ref_failure, RERUN_OR_ACCURACY).level:
        return None
    return result.stderr_text()
