"""The one place kill programs are run: the regression sweep's engine (pt2_bug_basher.execution.sweep), each
program a sample of a one-shard sweep in the mutant's interpreter (timeout, process group killed)."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "server")]

from pt2_bug_basher.execution.runner import ProcessOutcome  # noqa: E402
from pt2_bug_basher.execution.sweep import (  # noqa: E402
    Launched,
    ProgramSpec,
    SweepSpec,
    Target,
    plain_launcher,
    run_sweep,
)

KILL_DIR = HERE / "kill"
# No compiled-graph caches: a mutated compiler must compile again.
PROGRAM_ENV = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}


def run_programs(python: Path, programs: list[str], scratch: Path, timeout_s: float,
                 env: dict[str, str] | None = None) -> tuple[list[dict], bool]:
    """Run the programs (names in kill/, or paths) in one interpreter, one after another.

    Returns one result per program, {"program", "outcome": pass|wrong|crash, "error", "frames"}, and whether
    the interpreter ran past the timeout. A program reports a wrong result by exiting with status 3; any
    other failure is a crash (an interpreter that died, a segfault, crashes the program it was running)."""
    paths = {Path(p).stem: (KILL_DIR / p if not Path(p).is_absolute() else Path(p)) for p in programs}
    spec = SweepSpec(programs=[ProgramSpec(name=name, code=path.read_text()) for name, path in paths.items()])
    target = Target("mutant", str(python), scratch,
                    {**PROGRAM_ENV, **(env or {}), "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor-cache")})
    outcomes: list[ProcessOutcome] = []
    plain = plain_launcher(scratch / "sweep")

    async def launch(*args) -> Launched:
        launched = await plain(*args)
        outcomes.append(launched[0])
        return launched

    async def go():
        (scratch / "sweep").mkdir(parents=True, exist_ok=True)
        return await run_sweep(spec, target, scratch_dir=scratch / "sweep", launch=launch, budget_s=timeout_s,
                               shards=1, grace_s=0.0)

    run = anyio.run(go)
    timed_out = any(o.timed_out for o in outcomes)
    died = next((o.describe_exit() for o in outcomes if not o.timed_out and o.exit_code != 0), None)
    results = []
    for result in run.results:
        if result.outcome in ("not_run", "skip"):
            continue
        if result.outcome == "pass":
            outcome = "pass"
        elif result.outcome == "fail" and not result.frames:  # exit status 3: the program's own comparison
            outcome = "wrong"
        else:
            outcome = "crash"
        error = died if result.outcome == "timeout" and died else result.message
        results.append({"program": str(paths[result.key.name]), "outcome": outcome, "error": error,
                        "frames": result.frames})
    return results, timed_out
