"""Where a None came from: the repro run once more at the first failing backend under the spectrum probe's
profile hook, which records the compiler functions that returned a None of their own (`return None`, a bare
return, the end of the body) before the exception. Asked for when the exception says it used a None: the
function that made the None is more often the bug than the one that used it, and is no longer on the stack."""

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


async def none_returns(store: Store, case: CaseRecord, ref_failure, ref_env: dict[str, str], ref_args: list[str],
                       script: Path, *, backend: str | None, timeout_s: float, limiter: anyio.CapacityLimiter,
                       progress: ProgressFn) -> NoneReturns:
    folder = store.case_dir(case.case_id) / "origins"
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"none-returns-{backend or 'script'}.json"
    out.unlink(missing_ok=True)
    argv = rung_argv(case.python, script, ref_args, backend)
    async with limiter:
        await progress("localize: the repro once more, recording which compiler functions returned a None")
        result = await execute(store, case, with_spectrum(store, argv, out, none_returns=True), tool="localize",
                               cwd=script.parent, env_add=ref_env, timeout_s=timeout_s, progress=progress,
                               warm=WarmRequest(), label="localize: where the None came from")
    found = NoneReturns()
    if same_failure(run_failure(result), ref_failure, RERUN_OR_ACCURACY).level:
        try:
            data = json.loads(out.read_text())
            returns, root = data.get("none_returns", []), data.get("torch")
        except (OSError, ValueError, AttributeError):
            returns, root = [], None
        found.returns = [r for r in returns if isinstance(r, dict)] if isinstance(returns, list) else []
        found.root = Path(root) if isinstance(root, str) else None
        found.spectrum = read_spectrum(out, result.run_id, True, "the repro, recording the Nones returned")
    return found
