"""Step 3, first half (localize): the backend ablation ladder, then the compiler bisector's subsystems
below the failing backend, then suspects in torch's source."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from pt2_bug_basher.analysis.spectra import Formula, Spectrum, changed_lines_ran, files_to_read, function_spans, rank
from pt2_bug_basher.analysis.suspects import (
    SPECTRUM_RANKED,
    bisect_suspects,
    codegen_summary,
    exception_suspects,
    merge,
    spectrum_suspects,
)
from pt2_bug_basher.case.pages import read_tail
from pt2_bug_basher.case.scripts import copy_note
from pt2_bug_basher.domain.bisection import BisectReport
from pt2_bug_basher.domain.evidence import Suspect
from pt2_bug_basher.domain.names import CLOSED, Step, ToolName
from pt2_bug_basher.execution.cpus import usable_cpus
from pt2_bug_basher.execution.gitstate import RecentChange
from pt2_bug_basher.execution.runs import ProgressFn, ignore_progress
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.reduce.bisect import (
    BISECTABLE_BACKENDS,
    DEFAULT_BUDGET_S,
    BisectorTable,
    bisect_below,
    read_table,
    start_trial_server,
)
from pt2_bug_basher.reduce.evaluate import ForkServerEvaluator
from pt2_bug_basher.reduce.ladder import LAUNCHER, LadderRow, LocalizeResult, Reference, load_reference, run_timeout
from pt2_bug_basher.reduce.ladder import localize as run_ladder
from pt2_bug_basher.reduce.variants import DEFAULT_BUDGET_S as VARIANTS_BUDGET_S
from pt2_bug_basher.reduce.variants import VariantRun, circumstances, run_variants

SPECTRUM_FORMULA: Formula = "ochiai"
NO_PASSING_RUN = ("Every run localize made failed the case's way (rungs and variants alike), so the spectra have "
                  "no passing run to contrast and name no function. A near miss does: copy the repro, change one "
                  "thing so that it passes (the same operation written another way, an input that is not mutated, "
                  "one statement less) and pass the copies to localize as near_misses; their coverage then splits "
                  "the lines every failing run ran.")
VARIANTS_SHARE = 0.5
VARIANTS_FLOOR_S = 2.0


async def localize(
    state: AppState, case_id: str, script: str | None = None, *, bisect_budget_s: float = DEFAULT_BUDGET_S,
    progress: ProgressFn | None = None, variants_budget_s: float = VARIANTS_BUDGET_S,
    near_misses: Sequence[str] = (),
) -> LocalizeResult:
    """Rerun the repro (default: the reproduction's script) at each rung of the backend ladder; below a
    failing AOTAutograd-decomposition or Inductor backend, bisect its subsystems (budget 0: skip). Where no
    bisection isolates a culprit, near-miss variants of the repro run at the failing backend (budget 0: none);
    the spectra of every rung and variant rank torch's functions, merged with the other evidence."""
    flow = await state.gate(ToolName.localize, case_id)
    case = flow.case
    progress = progress or ignore_progress
    ref = load_reference(state.store, case)
    chosen = state.case_script(case, script or str(ref.script))
    path = chosen.path
    misses = [state.case_script(case, p, "near-miss script").path for p in near_misses]
    limiter = anyio.CapacityLimiter(usable_cpus())
    found: dict[str, BisectReport] = {}
    tables: dict[str, BisectorTable] = {}
    table_read = anyio.Event()
    problems: list[str] = []

    servers: dict[str, ForkServerEvaluator] = {}
    server_ready = anyio.Event()
    # The bisector's table and trial server are only wanted when the bug may be below Dynamo: they wait for
    # the eager rung not to fail the case's way, so a Dynamo bug's ladder has the cores to itself.
    below_dynamo = anyio.Event()
    read_scope = anyio.CancelScope()

    def on_row(row: LadderRow) -> None:
        if row.backend == "eager" and row.dynamic == "script" and row.outcome != "same failure":
            below_dynamo.set()

    async def read(group: TaskGroup) -> None:
        """The bisector's table, then (a CPU-only torch) a warm trial server, both while the ladder runs."""
        with read_scope:
            await below_dynamo.wait()
        if read_scope.cancel_called:
            return
        try:
            tables["table"] = await read_table(state.store, case, path.parent)
        except Exception as exc:  # noqa: BLE001 - an older torch without the bisector: the ladder still stands
            problems.append(f"the compiler bisector could not be read from the case's torch: {exc}")
        finally:
            table_read.set()
        try:
            table = tables.get("table")
            if table is not None and not table.cuda and bisect_budget_s > 0:
                server = await start_trial_server(state.store, case, ref, group, progress)
                if server is not None:
                    servers["trials"] = server
        finally:
            server_ready.set()

    spectra: list[Spectrum] = []
    varied: list[VariantRun] = []

    started = time.monotonic()

    async def below(first: str | None) -> None:
        await bisect(first)
        report = found.get("report")
        # generated variants only where nothing else says where: not when the bisection isolated the culprit,
        # nor for an exception raised inside torch (its frames say where); the agent's near misses always run
        isolated = report is not None and (report.culprit is not None or report.config is not None)
        generated = variants_budget_s > 0 and not isolated and (
            ref.category == "accuracy" or not exception_suspects(_reproduction_errors(state, ref)))
        # the variants may take about half what localize took to get here, so its wall time grows by at most half
        budget = min(variants_budget_s, max(VARIANTS_FLOOR_S, VARIANTS_SHARE * (time.monotonic() - started)))
        if generated or misses:
            varied.extend(await run_variants(
                state.store, case, ref.failure, ref.env, ref.args, path, launcher=LAUNCHER, backend=first,
                timeout_s=run_timeout(ref), limiter=limiter, progress=progress, budget_s=budget,
                near_misses=misses, generated=generated))

    async def bisect(first: str | None) -> None:
        if first in BISECTABLE_BACKENDS and bisect_budget_s > 0:
            await table_read.wait()
            if "table" not in tables:
                return
            await server_ready.wait()
            found["report"] = await bisect_below(state.store, case, ref, path, first, progress=progress,
                                                 cwd=path.parent, budget_s=bisect_budget_s,
                                                 table=tables.get("table"), limiter=limiter,
                                                 forked=servers.get("trials"))

    async with anyio.create_task_group() as group:
        group.start_soon(read, group)
        try:
            result = await run_ladder(state.store, case, ref, path, progress=progress, limiter=limiter, below=below,
                                      on_row=on_row, spectra=spectra)
        finally:
            if below_dynamo.is_set():
                await server_ready.wait()
            else:
                read_scope.cancel()
            if "trials" in servers:
                await servers["trials"].aclose()
    result.notes += problems
    if "report" in found:
        result.bisection = found["report"]
        result.suspects = bisect_suspects(result.bisection)
    elif result.first_failing in BISECTABLE_BACKENDS and bisect_budget_s == 0:
        result.notes.append("bisection below the backend was skipped (bisect_budget_s=0).")
    if ref.category != "accuracy":  # a mismatch is raised by the comparison, not where the bug is
        result.suspects += [s for s in exception_suspects(_reproduction_errors(state, ref))
                            if (s.file, s.line) not in {(t.file, t.line) for t in result.suspects}]
    result.variants = [v.outcome for v in varied]
    result.circumstances = circumstances(result.variants)
    spectra += [v.spectrum for v in varied if v.spectrum is not None]
    result.suspects = merge(result.suspects, await anyio.to_thread.run_sync(spectral, spectra))
    if spectra and all(s.failed for s in spectra):
        result.notes.append(NO_PASSING_RUN)
    places = [(s.file, s.line, s.function) for s in result.suspects[:MAX_BLAMED] if s.line]
    if result.bisection is not None:
        places += [(c.file, c.line, c.function) for c in result.bisection.codegen[:MAX_BLAMED_CODEGEN] if c.line]
    ran = await anyio.to_thread.run_sync(changed_functions_ran, Path(case.repo), spectra)
    places += [(r.file, r.line, r.function) for r in ran]
    changes = await anyio.to_thread.run_sync(recent_changes, Path(case.repo), places,
                                             {(r.file, r.function): r.why for r in ran})
    result.suspects = changed_first(result.suspects, changes)
    if result.suspects:
        top = result.suspects[0]
        result.meaning += f" First suspect: {top.function} at {top.file}:{top.line} ({top.why})."
        if result.bisection is not None:
            result.meaning += codegen_summary(result.bisection)
    if result.circumstances:
        result.meaning += f" Near-miss variants: the repro {'; '.join(result.circumstances)}."
    changed = [change_sentence(change) for change in changes]
    if changed and result.suspects and _holds(changes[0], result.suspects[0]):
        # the first suspect already says which commit changed it
        result.meaning += f" The change to read once the test fails: git show {changes[0].change.commit}."
        result.notes += changed
    elif changed:
        result.meaning += f" {changed[0]}"
        result.notes += changed[1:]
    if note := copy_note(chosen):
        result.notes.append(note)
    record = state.store.localization(case_id)
    if record is not None:
        record.suspects = result.suspects
        state.store.set_localization(case_id, record)
    status = await state.status(case_id)
    reduced = next(s for s in status.steps if s.step == Step.reduce)
    if reduced.status in CLOSED:  # never propose a reduction the case already has
        result.next_step = f"Step 3 is complete already ({reduced.evidence}). {status.next_step}"
    return result


def spectral(spectra: list[Spectrum]) -> list[tuple[Suspect, int]]:
    """The functions the spectra rank, as suspects (the sources read from the case's torch)."""
    if len({s.failed for s in spectra}) < 2:
        return []  # nothing to rank without a failing and a passing run: read no source
    sources: dict[str, str] = {}
    for file in files_to_read(spectra):
        root = next((s.root for s in spectra if file in s.lines), "")
        try:
            sources[file] = (Path(root) / file).read_text(errors="replace")
        except OSError:
            continue
    ranked = rank(spectra, sources, SPECTRUM_FORMULA, limit=SPECTRUM_RANKED)
    failing = sum(1 for s in spectra if s.failed)
    return spectrum_suspects(ranked, SPECTRUM_FORMULA, failing, len(spectra) - failing)


MAX_BLAMED = 3  # suspects whose recent history is read (git blame of each function, four at a time)
MAX_CHANGED_RAN = 3  # ... and functions whose recently changed lines the failing runs ran
MAX_BLAMED_CODEGEN = 8  # ... and code-generation functions that ran only with the culprit


@dataclass(frozen=True)
class FunctionChange:
    """A suspect function that one of the last commits of HEAD changed."""

    file: str
    first: int
    last: int
    function: str
    change: RecentChange
    reached: str | None = None
    """how the spectra reached it (None: a suspect, or code generation that ran only with the culprit)"""

    def when(self) -> str:
        back = self.change.commits_before_head
        return "HEAD itself" if back == 0 else f"{back} commit(s) before HEAD"


@dataclass(frozen=True)
class ChangedRan:
    """A function whose recently changed lines a failing run ran."""

    file: str
    line: int
    function: str
    why: str


def changed_functions_ran(repo: Path, spectra: list[Spectrum]) -> list[ChangedRan]:
    """The functions of the repository whose lines changed in the last commits (or uncommitted) ran in the
    failing runs and not in every passing one: the spectra and the history pointing at the same lines. Only
    where torch is imported from the repository itself."""
    from pt2_bug_basher.execution.gitstate import RECENT_COMMITS, recently_changed_lines

    inside = {s.root for s in spectra if s.root and Path(s.root).resolve() == repo.resolve()}
    mine = [s for s in spectra if s.root in inside]
    files = sorted({file for s in mine if s.failed for file in s.lines})
    hits = changed_lines_ran(mine, recently_changed_lines(repo, files), SPECTRUM_FORMULA)
    spans: dict[str, list] = {}
    found: dict[tuple[str, str], list] = {}
    for hit in hits:
        if hit.file not in spans:
            spans[hit.file] = function_spans((repo / hit.file).read_text(errors="replace"))
        holding = [s for s in spans[hit.file] if s.first <= hit.line <= s.last]
        if not holding:
            continue
        span = min(holding, key=lambda s: s.last - s.first)
        key = (hit.file, span.qualname)
        if key not in found and len(found) == MAX_CHANGED_RAN:
            continue
        found.setdefault(key, []).append(hit)
    failing = sum(1 for s in mine if s.failed)
    out = []
    for (file, function), lines in found.items():
        top = lines[0]
        numbers = ", ".join(str(h.line) for h in sorted(lines, key=lambda h: h.line)[:6])
        out.append(ChangedRan(file, top.line, function, (
            f"lines {numbers}, changed within the last {RECENT_COMMITS} commits, ran in {top.failed_runs}/{failing} "
            f"failing and {top.passed_runs}/{len(mine) - failing} passing runs ({SPECTRUM_FORMULA} {top.score:.2f})")))
    return out


def recent_changes(repo: Path, places: list[tuple[str, int, str]],
                   reached: dict[tuple[str, str], str] | None = None) -> list[FunctionChange]:
    """The suspect functions that one of the last commits of HEAD changed (a regression's likeliest cause),
    most recently changed first. Functions outside the repository, or changed long ago, are left out."""
    from pt2_bug_basher.analysis.suspects import enclosing_function, function_spans
    from pt2_bug_basher.execution.gitstate import recent_change

    spans: dict[str, list[tuple[int, int]]] = {}  # each file read and parsed once
    functions: dict[tuple[str, int, int], str] = {}
    for file, line, function in places:
        path = repo / file
        if file not in spans and path.is_file():
            spans[file] = function_spans(path.read_text(errors="replace"))
        if file in spans:
            first, last = enclosing_function(spans[file], line)
            functions.setdefault((file, first, last), function)
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = list(pool.map(lambda place: recent_change(repo, *place), functions))
    how = reached or {}
    changes = [FunctionChange(file, first, last, function, change, how.get((file, function)))
               for ((file, first, last), function), change in zip(functions.items(), found, strict=True) if change]
    return sorted(changes, key=lambda c: c.change.commits_before_head)


def change_sentence(c: FunctionChange) -> str:
    from pt2_bug_basher.execution.gitstate import RECENT_COMMITS

    return (f"{c.function} ({c.file}:{c.first}-{c.last}) was changed by {c.change.commit} \"{c.change.subject}\" "
            f"({c.change.date}, {c.when()}, within the last {RECENT_COMMITS}): read that change first.")


def _holds(change: FunctionChange, suspect: Suspect) -> bool:
    return suspect.file == change.file and suspect.line is not None and change.first <= suspect.line <= change.last


def changed_first(suspects: list[Suspect], changes: list[FunctionChange]) -> list[Suspect]:
    """The suspects with the recently changed functions first (most recent change first), each saying which
    commit changed it; a changed code-generation function the list lacks joins it there. The rest keep
    their order."""
    if not changes:
        return suspects
    front: list[Suspect] = []
    rest = list(suspects)
    for c in changes:
        said = f"changed by {c.change.commit} \"{c.change.subject}\" ({c.when()})"
        held = [s for s in rest if _holds(c, s)]
        if held:
            for s in held:
                rest.remove(s)
                front.append(s.model_copy(update={"why": f"{s.why}; {said}",
                                                  "evidence": [*s.evidence, "recent_change"]}))
        else:
            reach = c.reached or "ran only with the culprit lowered (code generation)"
            front.append(Suspect(file=c.file, line=c.first, function=c.function, why=f"{said}; {reach}",
                                 evidence=["recent_change", "spectrum" if c.reached else "codegen"]))
    return front + rest


def _reproduction_errors(state: AppState, ref: Reference) -> str:
    for run_id in ref.run_ids[:1]:
        try:
            run = state.store.get_run(run_id, ref.case_id)
        except Exception:  # noqa: BLE001 - a missing run only loses its frames
            return ""
        return read_tail(Path(run.stderr_path), 4 * 1024 * 1024) or "" if run.stderr_path else ""
    return ""
