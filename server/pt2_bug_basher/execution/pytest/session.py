"""Running pytest in the case's interpreter: selectors, where to run, pytest-xdist, the report plugin.

Every run loads the report plugin (`_probes/pytest_plugin/pt2bb_pytest_report.py`, its folder last
on PYTHONPATH) and is read from the JSON lines it writes (`results.parse_report`), never from
pytest's console output.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pt2_bug_basher.case.store import CaseRecord, Store, new_id
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.execution.pytest.results import PytestReport, parse_report
from pt2_bug_basher.execution.runs import ProgressFn, RunResult, execute
from pt2_bug_basher.execution.warm import WarmRequest

PLUGIN_DIR = Path(__file__).resolve().parents[2] / "_probes" / "pytest_plugin"
PLUGIN = "pt2bb_pytest_report"
XDIST_MIN_TESTS = 6
COLLECT_CACHE_SIZE = 64

_XDIST_CACHE: dict[str, bool] = {}
_COLLECT_CACHE: dict[tuple, PytestReport] = {}


async def has_xdist(store: Store, python: str) -> bool:
    if python not in _XDIST_CACHE:
        from pt2_bug_basher.execution.runner import run_captured

        captured = await run_captured(
            [python, "-c", "import xdist"], cwd=store.state_dir, env=dict(os.environ), timeout_s=60,
            scratch_dir=store.state_dir / "scratch",
        )
        _XDIST_CACHE[python] = captured.outcome.exit_code == 0
    return _XDIST_CACHE[python]


@dataclass
class PytestRun:
    run: RunResult
    report: PytestReport
    argv: list[str]
    usage_error: str | None = None
    workers: int = 0

    @property
    def run_id(self) -> str:
        return self.run.run_id


def check_selector(value: str, what: str) -> str:
    if not value or not value.strip():
        raise InvalidInput(f"{what} is empty.")
    if value.startswith("-"):
        raise InvalidInput(f"{what} {value!r} looks like a command-line option; pass a test node id or expression.")
    if "\x00" in value or len(value) > 2000 or "\n" in value:
        raise InvalidInput(f"{what} must be one line under 2000 characters without NUL bytes.")
    return value


def absolute_selector(selector: str, rootdir: Path) -> str:
    """A rootdir-relative node id as an absolute one, so any working directory selects the same test."""
    file, sep, rest = selector.partition("::")
    path = Path(file)
    return str(path if path.is_absolute() else rootdir / path) + sep + rest


def pythonpath_with(first: Path, environ: Mapping[str, str] | None = None) -> str:
    existing = (os.environ if environ is None else environ).get("PYTHONPATH", "")
    return str(first) + (os.pathsep + existing if existing else "")


def with_plugin(env_add: dict[str, str] | None) -> dict[str, str]:
    """Environment additions with the report plugin's folder last on PYTHONPATH (it shadows nothing)."""
    env = dict(env_add or {})
    existing = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = (existing + os.pathsep if existing else "") + str(PLUGIN_DIR)
    return env


async def run_pytest(
    store: Store,
    case: CaseRecord,
    selectors: list[str],
    *,
    cwd: Path,
    rootdir: Path,
    tool: str,
    keyword: str | None = None,
    only: str | None = None,
    collect_only: bool = False,
    env_add: dict[str, str] | None = None,
    timeout_s: float,
    progress: ProgressFn | None = None,
    workers: int = 0,
    label: str = "pytest",
) -> PytestRun:
    """Run pytest with the case's interpreter and read the report plugin's results.

    `only` ("Class.test") keeps that test and the tests generated from it, by exact names."""
    report_dir = store.case_dir(case.case_id) / "pytest"
    report_dir.mkdir(parents=True, exist_ok=True)
    report_path = report_dir / f"{new_id('report')}.jsonl"
    base = [case.python, "-m", "pytest", "-p", "no:cacheprovider", "-p", PLUGIN, f"--pt2bb-report={report_path}",
            "--tb=native", "-q", "-rN", "--continue-on-collection-errors", f"--rootdir={rootdir}"]
    options = (["--collect-only"] if collect_only else []) + ([f"--pt2bb-only={only}"] if only else [])
    tail = (["-k", keyword] if keyword else []) + ["--", *(absolute_selector(s, rootdir) for s in selectors)]
    argv = base + options + (["-n", str(workers)] if workers > 1 else []) + tail
    run = await execute(store, case, argv, tool=tool, cwd=cwd, env_add=with_plugin(env_add), timeout_s=timeout_s,
                        progress=progress, label=label, warm=WarmRequest(append_path=(str(PLUGIN_DIR),)))
    stderr = run.stderr_text(64 * 1024)
    if workers > 1 and run.outcome.exit_code == 4 and "-n" in stderr and "unrecognized arguments" in stderr:
        # The project's pytest configuration disables xdist: run serially.
        return await run_pytest(store, case, selectors, cwd=cwd, rootdir=rootdir, tool=tool, keyword=keyword,
                                only=only, collect_only=collect_only, env_add=env_add, timeout_s=timeout_s,
                                progress=progress, workers=0, label=label)
    report = parse_report(report_path) if report_path.exists() else PytestReport(parse_error="pytest wrote no report")
    usage = None
    if run.outcome.timed_out:
        usage = f"pytest was killed after the timeout ({timeout_s:.0f}s)"
    elif run.outcome.signal_name:
        usage = f"pytest was killed by {run.outcome.signal_name}"
    elif run.outcome.exit_code in (3, 4) or not (report.tests or report.collection_errors or report.collected):
        lines = [ln.strip() for ln in (stderr + "\n" + run.stdout_text(16 * 1024)).splitlines()
                 if ln.strip().startswith(("ERROR", "INTERNALERROR", "E ", "no tests ran", "usage:", "pytest:"))]
        usage = ("; ".join(dict.fromkeys(lines))[:1000] or
                 f"pytest ran no test ({run.outcome.describe_exit()})")
    return PytestRun(run=run, report=report, argv=argv, usage_error=usage, workers=workers)


async def collect(store: Store, case: CaseRecord, files: list[str], *, cwd: Path, rootdir: Path, tool: str,
                  env_add: dict[str, str] | None = None, timeout_s: float,
                  progress: ProgressFn | None = None) -> PytestReport:
    """The tests pytest collects from `files` (rootdir-relative), with their node ids. Remembered
    while the files are unchanged, for the same interpreter and environment."""
    stamps: list[tuple[str, int | None, int | None]] = []
    for rel in files:
        try:
            stat = (rootdir / rel).stat()
            stamps.append((rel, stat.st_mtime_ns, stat.st_size))
        except OSError:
            stamps.append((rel, None, None))
    key = (case.python, str(rootdir), str(cwd), tuple(sorted((env_add or {}).items())), tuple(stamps))
    if key not in _COLLECT_CACHE:
        ran = await run_pytest(store, case, files, cwd=cwd, rootdir=rootdir, tool=tool, collect_only=True,
                               env_add=env_add, timeout_s=timeout_s, progress=progress,
                               label=f"pytest --collect-only ({len(files)} files)")
        if ran.usage_error and not ran.report.collected:
            ran.report.parse_error = ran.report.parse_error or ran.usage_error
            return ran.report  # not remembered: the next call tries again
        if len(_COLLECT_CACHE) >= COLLECT_CACHE_SIZE:
            _COLLECT_CACHE.pop(next(iter(_COLLECT_CACHE)))
        _COLLECT_CACHE[key] = ran.report
    return _COLLECT_CACHE[key]


def repo_cwd(case: CaseRecord, repo: Path, test_file: str | None) -> tuple[Path, list[str]]:
    """Where to run pytest on the primary checkout. From the repository root, unless that root holds
    a torch/ package that is not the torch the case imports (an installed build beside a checkout):
    `python -m pytest` puts its working directory first on the path, which would shadow it."""
    if case.torch_from_repo or not (repo / "torch" / "__init__.py").is_file():
        return repo, []
    cwd = (repo / test_file).parent if test_file else repo / "test"
    return (cwd if cwd.is_dir() else repo), [
        "torch is not imported from the repository, so the tests run against the installed torch; "
        "edits to the repository's torch sources are not exercised"]
