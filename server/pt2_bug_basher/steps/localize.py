"""Step 3, first half (localize): the backend ablation ladder, then the compiler bisector's subsystems
below the failing backend, then suspects in torch's source."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from pt2_bug_basher.analysis.break_sites import break_site_suspects
from pt2_bug_basher.analysis.fx_code import fx_writer_suspects, generated_code_note, raised_in_fx_code
from pt2_bug_basher.analysis.spectra import Formula, Spectrum, changed_lines_ran, files_to_read, function_spans, rank
from pt2_bug_basher.analysis.suspects import (
    SPECTRUM_RANKED,
    bisect_suspects,
    broken_invariant,
    codegen_summary,
    exception_suspects,
    merge,
    none_origin_suspects,
    none_used,
    spectrum_suspects,
)
from pt2_bug_basher.case.pages import read_tail
from pt2_bug_basher.case.scripts import copy_note
from pt2_bug_basher.case.store import CaseRecord
from pt2_bug_basher.domain.bisection import BisectReport
from pt2_bug_basher.domain.evidence import Suspect
from pt2_bug_basher.domain.names import CLOSED, Step, ToolName
from pt2_bug_basher.execution.cpus import usable_cpus
from pt2_bug_basher.execution.gitstate import (
    RECENT_COMMITS,
    changed_lines_since,
    good_commit,
    recently_changed_lines,
    unpushed_changed_lines,
)
from pt2_bug_basher.execution.history import (
    MAX_BLAMED,
    FunctionChange,
    change_sentence,
    changed_first,
    holds,
    recent_changes,
)
from pt2_bug_basher.execution.runs import LAUNCHER, ProgressFn, ignore_progress
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
from pt2_bug_basher.reduce.ladder import LadderRow, LocalizeResult, Reference, load_reference, run_timeout
from pt2_bug_basher.reduce.ladder import localize as run_ladder
from pt2_bug_basher.reduce.origins import STRIPPED, FxWriters, NoneReturns, fx_writers, internal_stack, none_returns
from pt2_bug_basher.reduce.variants import DEFAULT_BUDGET_S as VARIANTS_BUDGET_S
from pt2_bug_basher.reduce.variants import VariantRun, circumstances, run_variants

SPECTRUM_FORMULA: Formula = "ochiai"
INTERNAL_NOTE = ("The exception's frames are a rerun's with TORCHDYNAMO_VERBOSE=1: the reproduction's traceback left "
                 "Dynamo's internal frames out.")
NO_PASSING_RUN = ("Every run localize made failed the case's way (rungs and variants alike), so the spectra have "
                  "no passing run to contrast and rank no function by themselves. A near miss does: copy the repro, "
                  "change one thing so that it passes (the same operation written another way, an input that is "
                  "not mutated, one statement less) and pass the copies to localize as near_misses; their coverage "
                  "then splits the lines every failing run ran.")
GOOD_REF_HINT = ("If the repro passed at an earlier commit (it broke with a pull or a rebase), pass that commit as "
                 "good_ref (ORIG_HEAD, or the commit `git reflog` shows before the pull): every line changed since "
                 "then that a failing run ran becomes a suspect.")
VARIANTS_SHARE = 0.5
VARIANTS_FLOOR_S = 2.0


async def localize(
    state: AppState, case_id: str, script: str | None = None, *, bisect_budget_s: float = DEFAULT_BUDGET_S,
    progress: ProgressFn | None = None, variants_budget_s: float = VARIANTS_BUDGET_S,
    near_misses: Sequence[str] = (), good_ref: str | None = None,
) -> LocalizeResult:
    """Rerun the repro (default: the reproduction's script) at each rung of the backend ladder; below a
    failing AOTAutograd-decomposition or Inductor backend, bisect its subsystems (budget 0: skip). Where no
    bisection isolates a culprit, near-miss variants of the repro run at the failing backend (budget 0: none);
    the spectra of every rung and variant rank torch's functions, merged with the other evidence. `good_ref`:
    a commit where the repro passed; the lines changed since then that failing runs ran are suspects."""
    flow = await state.gate(ToolName.localize, case_id)
    case = flow.case
    good = (await anyio.to_thread.run_sync(good_commit, Path(case.repo), good_ref)) if good_ref else None
    ref = load_reference(state.store, case)
    chosen = state.case_script(case, script or str(ref.script))
    misses = [state.case_script(case, p, "near-miss script").path for p in near_misses]
    run = _LadderRun(state, case, ref, chosen.path, misses, progress or ignore_progress, bisect_budget_s,
                     variants_budget_s)
    result = await run.ladder()
    _gather(result, run)
    await _rank(result, run.spectra, good_ref is not None)
    changes = await _recent(result, Path(case.repo), run.spectra, good and Since(good_ref or "", *good))
    _explain(result, changes)
    if note := copy_note(chosen):
        result.notes.append(note)
    await _record(state, case_id, result)
    return result


@dataclass
class _LadderRun:
    """What localize's parts share while the ladder runs: the bisector's table and trial server (read once the
    eager rung does not fail the case's way), the bisection's report, and the spectra and variants' runs."""

    state: AppState
    case: CaseRecord
    ref: Reference
    path: Path
    misses: list[Path]
    progress: ProgressFn
    bisect_budget_s: float
    variants_budget_s: float
    limiter: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(usable_cpus()))
    table: BisectorTable | None = None
    server: ForkServerEvaluator | None = None
    report: BisectReport | None = None
    problems: list[str] = field(default_factory=list)
    spectra: list[Spectrum] = field(default_factory=list)
    varied: list[VariantRun] = field(default_factory=list)
    origins: NoneReturns | None = None
    writers: FxWriters | None = None
    internal: str | None = None  # the failure's stderr with Dynamo's internal frames (TORCHDYNAMO_VERBOSE=1)
    internal_read: anyio.Event = field(default_factory=anyio.Event)
    table_read: anyio.Event = field(default_factory=anyio.Event)
    server_ready: anyio.Event = field(default_factory=anyio.Event)
    # The bisector's table and trial server are only wanted when the bug may be below Dynamo: they wait for
    # the eager rung not to fail the case's way, so a Dynamo bug's ladder has the cores to itself.
    below_dynamo: anyio.Event = field(default_factory=anyio.Event)
    read_scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    started: float = field(default_factory=time.monotonic)

    async def ladder(self) -> LocalizeResult:
        """The ladder, with the bisector read beside it; the trial server is closed when it ends."""
        async with anyio.create_task_group() as group:
            group.start_soon(self.read, group)
            if self.stripped:  # the script as it is, beside the ladder: the frames are its exception's
                group.start_soon(self.rerun_verbose)
            try:
                result = await run_ladder(self.state.store, self.case, self.ref, self.path, progress=self.progress,
                                          limiter=self.limiter, below=self.below, on_row=self.on_row,
                                          spectra=self.spectra)
            finally:
                if self.below_dynamo.is_set():
                    await self.server_ready.wait()
                else:
                    self.read_scope.cancel()
                if self.server is not None:
                    await self.server.aclose()
        return result

    @cached_property
    def errors(self) -> str:
        """The reproduction's stderr, read once."""
        return _reproduction_errors(self.state, self.ref)

    @cached_property
    def stripped(self) -> bool:
        """Dynamo left its internal frames out of the reproduction's traceback (and it is no mismatch)."""
        return STRIPPED in self.errors and self.ref.category != "accuracy"

    @property
    def failure_text(self) -> str:
        """The reproduction's stderr, or the rerun's with Dynamo's internal frames (read once it ended)."""
        return self.internal or self.errors

    @cached_property
    def raised(self) -> list[Suspect]:
        """What the reproduction's exception frames name."""
        return exception_suspects(self.failure_text)

    @cached_property
    def none_used(self) -> str | None:
        """The exception raised inside torch, when it used a None (and is no comparison's mismatch)."""
        return none_used(self.failure_text) if self.ref.category != "accuracy" and self.raised else None

    @cached_property
    def invariant(self) -> str | None:
        """The exception raised inside torch, when it is an assertion (and is no comparison's mismatch)."""
        return broken_invariant(self.failure_text) if self.ref.category != "accuracy" and self.raised else None

    @cached_property
    def in_fx_code(self) -> bool:
        """The exception went through FX-generated code (or bound its arguments wrong calling it)."""
        return self.ref.category != "accuracy" and raised_in_fx_code(self.failure_text)

    def on_row(self, row: LadderRow) -> None:
        # a failure below Dynamo: eager ran a compiled call and did not fail the case's way (a script with no
        # call to swap, torch.export alone, has nothing to bisect: no trial server for it)
        if row.backend == "eager" and row.dynamic == "script" and row.outcome not in ("same failure", "not compiled"):
            self.below_dynamo.set()

    async def read(self, group: TaskGroup) -> None:
        """The bisector's table, then (a CPU-only torch) a warm trial server, both while the ladder runs."""
        with self.read_scope:
            await self.below_dynamo.wait()
        if self.read_scope.cancel_called:
            return
        try:
            self.table = await read_table(self.state.store, self.case, self.path.parent)
        except Exception as exc:  # noqa: BLE001 - an older torch without the bisector: the ladder still stands
            self.problems.append(f"the compiler bisector could not be read from the case's torch: {exc}")
        finally:
            self.table_read.set()
        try:
            if self.table is not None and not self.table.cuda and self.bisect_budget_s > 0:
                self.server = await start_trial_server(self.state.store, self.case, self.ref, group, self.progress)
        finally:
            self.server_ready.set()

    async def below(self, first: str | None) -> None:
        """Below the first failing backend: the bisection, then (with Dynamo's internal frames, where it left
        them out) the near-miss variants."""
        await self.bisect(first)
        if self.stripped:
            await self.internal_read.wait()
        report = self.report
        # generated variants only where nothing else says where: not when the bisection isolated the culprit,
        # nor for an exception raised inside torch (its frames say where); the agent's near misses always run
        isolated = report is not None and (report.culprit is not None or report.config is not None)
        generated = self.variants_budget_s > 0 and not isolated and (
            self.ref.category == "accuracy" or not self.raised)
        # the variants may take about half what localize took to get here, so its wall time grows by at most half
        budget = min(self.variants_budget_s,
                     max(VARIANTS_FLOOR_S, VARIANTS_SHARE * (time.monotonic() - self.started)))
        async with anyio.create_task_group() as group:
            if self.none_used or self.invariant:
                group.start_soon(self.find_none, first)
            if self.in_fx_code:
                group.start_soon(self.find_writers, first)
            if generated or self.misses:
                ref = self.ref
                self.varied.extend(await run_variants(
                    self.state.store, self.case, ref.failure, ref.env, ref.args, self.path, launcher=LAUNCHER,
                    backend=first, timeout_s=run_timeout(ref), limiter=self.limiter, progress=self.progress,
                    budget_s=budget, near_misses=self.misses, generated=generated))

    async def rerun_verbose(self) -> None:
        """The reproduction's failure with Dynamo's internal frames, which it printed without."""
        ref = self.ref
        try:
            self.internal = await internal_stack(self.state.store, self.case, ref.failure, ref.env, ref.args,
                                                 self.path, backend=None, timeout_s=run_timeout(ref),
                                                 limiter=self.limiter, progress=self.progress)
        finally:
            self.internal_read.set()

    async def find_none(self, first: str | None) -> None:
        """Which compiler functions returned a None of their own before the exception that used one."""
        ref = self.ref
        self.origins = await none_returns(self.state.store, self.case, ref.failure, ref.env, ref.args, self.path,
                                          backend=first, timeout_s=run_timeout(ref), limiter=self.limiter,
                                          progress=self.progress)

    async def find_writers(self, first: str | None) -> None:
        """Which functions of torch.fx wrote the generated code that raised."""
        ref = self.ref
        self.writers = await fx_writers(self.state.store, self.case, ref.failure, ref.env, ref.args, self.path,
                                        backend=first, timeout_s=run_timeout(ref), limiter=self.limiter,
                                        progress=self.progress)

    async def bisect(self, first: str | None) -> None:
        if first in BISECTABLE_BACKENDS and self.bisect_budget_s > 0:
            await self.table_read.wait()
            if self.table is None:
                return
            await self.server_ready.wait()
            self.report = await bisect_below(self.state.store, self.case, self.ref, self.path, first,
                                             progress=self.progress, cwd=self.path.parent,
                                             budget_s=self.bisect_budget_s, table=self.table, limiter=self.limiter,
                                             forked=self.server)


def _gather(result: LocalizeResult, run: _LadderRun) -> None:
    """The bisection's report and suspects, the exception's frames, and the variants, into the ladder's result."""
    result.notes += run.problems
    if run.report is not None:
        result.bisection = run.report
        result.suspects = bisect_suspects(result.bisection)
    elif result.first_failing in BISECTABLE_BACKENDS and run.bisect_budget_s == 0:
        result.notes.append("bisection below the backend was skipped (bisect_budget_s=0).")
    if run.ref.category != "accuracy":  # a mismatch is raised by the comparison, not where the bug is
        raised = [s for s in run.raised if (s.file, s.line) not in {(t.file, t.line) for t in result.suspects}]
        found = run.writers
        writers = fx_writer_suspects(found.report, found.errors) if found is not None else []
        named = {(s.file, s.function) for s in [*result.suspects, *raised]}
        # a graph break's site and what decided it: ahead of the frames, which Dynamo re-raised elsewhere
        breaks = [s for s in break_site_suspects(run.failure_text, _torch_dir(run))
                  if (s.file, s.function) not in named]
        sites = {(s.file, s.line): s for s in breaks}
        for frame in raised:  # the site is also a frame of the traceback: one suspect, ranked as the site
            if (frame.file, frame.line) in sites:
                sites[frame.file, frame.line].why += f"; also the traceback's {frame.why}"
        raised = [s for s in raised if (s.file, s.line) not in sites]
        # a None the exception used comes right after its innermost frame; one that may have broken an invariant
        # after the assertion's caller too
        cut = 1 if run.none_used else 2
        result.suspects += breaks + raised[:cut] + _origins(run, raised) + writers + raised[cut:]
        if found is not None and (note := generated_code_note(found.report, found.errors)):
            result.notes.append(note)
        if run.internal:
            result.notes.append(INTERNAL_NOTE)
    result.variants = [v.outcome for v in run.varied]
    result.circumstances = circumstances(result.variants)
    run.spectra += [v.spectrum for v in run.varied if v.spectrum is not None]
    run.spectra += [extra.spectrum for extra in (run.origins, run.writers) if extra is not None and extra.spectrum]


def _torch_dir(run: _LadderRun) -> Path | None:
    """The torch package the case's runs imported: their spectra's, else the one check_env saw."""
    root = next((s.root for s in run.spectra if s.root), None)
    return Path(root) / "torch" if root else run.case.torch_dir


def _origins(run: _LadderRun, raised: list[Suspect]) -> list[Suspect]:
    """The functions that made the None the exception used, but those its frames already name."""
    found = run.origins
    raised_text = run.none_used or run.invariant
    if found is None or found.root is None or raised_text is None:
        return []
    named = {(s.file, s.function) for s in raised}
    return [s for s in none_origin_suspects(found.returns, found.root, raised_text, used=run.none_used is not None)
            if (s.file, s.function) not in named]


async def _rank(result: LocalizeResult, spectra: list[Spectrum], good_ref_given: bool) -> None:
    """The spectra's ranked functions merged into the suspects; a note when no run passed (naming good_ref only
    where it was not passed)."""
    result.suspects = merge(result.suspects, await anyio.to_thread.run_sync(spectral, spectra))
    if spectra and all(s.failed for s in spectra):
        result.notes.append(NO_PASSING_RUN if good_ref_given else f"{NO_PASSING_RUN} {GOOD_REF_HINT}")


async def _recent(result: LocalizeResult, repo: Path, spectra: list[Spectrum],
                  since: Since | None = None) -> list[FunctionChange]:
    """The suspects (and code generation, and recently changed lines the failing runs ran) that recent commits
    changed, moved first; the changes, most recent first. `since`: the commit where the repro passed, whose
    changes since count whatever the passing runs ran."""
    places = [(s.file, s.line, s.function) for s in result.suspects[:MAX_BLAMED] if s.line]
    if result.bisection is not None:
        places += [(c.file, c.line, c.function) for c in result.bisection.codegen[:MAX_BLAMED_CODEGEN] if c.line]
    ran = await anyio.to_thread.run_sync(changed_functions_ran, repo, spectra, since)
    places += [(r.file, r.line, r.function) for r in ran]
    within = max(RECENT_COMMITS, since.ahead + 1) if since is not None else RECENT_COMMITS
    changes = await anyio.to_thread.run_sync(recent_changes, repo, places,
                                             {(r.file, r.function): r.why for r in ran}, within)
    if since is not None and not ran:
        result.notes.append(f"No line changed since good_ref {since.ref} ({since.commit[:12]}, {since.ahead} "
                            "commit(s) before HEAD) ran in a failing run: the regression is not in torch's "
                            "compiler sources of that range, or the repro did not pass there.")
    result.suspects = changed_first(result.suspects, changes)
    return changes


def _explain(result: LocalizeResult, changes: list[FunctionChange]) -> None:
    """The first suspect, the near misses' circumstances and the change to read, in the result's meaning."""
    if result.suspects:
        top = result.suspects[0]
        result.meaning += f" First suspect: {top.function} at {top.file}:{top.line} ({top.why})."
        if result.bisection is not None:
            result.meaning += codegen_summary(result.bisection)
    if result.circumstances:
        result.meaning += f" Near-miss variants: the repro {'; '.join(result.circumstances)}."
    changed = [change_sentence(change) for change in changes]
    if changed and result.suspects and holds(changes[0], result.suspects[0]):
        # the first suspect already says which commit changed it
        result.meaning += f" The change to read once the test fails: {changes[0].read()}."
        result.notes += changed
    elif changed:
        result.meaning += f" {changed[0]}"
        result.notes += changed[1:]


async def _record(state: AppState, case_id: str, result: LocalizeResult) -> None:
    """The suspects onto the case's localization; no reduction proposed to a case that has one."""
    record = state.store.localization(case_id)
    if record is not None:
        record.suspects = result.suspects
        state.store.set_localization(case_id, record)
    status = await state.status(case_id)
    reduced = next(s for s in status.steps if s.step == Step.reduce)
    if reduced.status in CLOSED:  # never propose a reduction the case already has
        result.next_step = f"Step 3 is complete already ({reduced.evidence}). {status.next_step}"


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


MAX_CHANGED_RAN = 3  # ... and functions whose recently changed lines the failing runs ran
MAX_BLAMED_CODEGEN = 8  # ... and code-generation functions that ran only with the culprit


@dataclass(frozen=True)
class ChangedRan:
    """A function whose recently changed lines a failing run ran."""

    file: str
    line: int
    function: str
    why: str


@dataclass(frozen=True)
class Since:
    """The commit the agent says the repro passed at (good_ref), and how many commits HEAD has that it lacks."""

    ref: str
    commit: str
    ahead: int


def changed_functions_ran(repo: Path, spectra: list[Spectrum], since: Since | None = None) -> list[ChangedRan]:
    """The functions of the repository whose lines changed in the last commits (or uncommitted) ran in the
    failing runs and not in every passing one: the spectra and the history pointing at the same lines. The
    user's own changes (commits no remote branch holds, and uncommitted edits) count whenever a failing run
    ran them, passing runs or not. Only where torch is imported from the repository itself."""
    inside = {s.root for s in spectra if s.root and Path(s.root).resolve() == repo.resolve()}
    mine = [s for s in spectra if s.root in inside]
    files = sorted({file for s in mine if s.failed for file in s.lines})
    if not files:
        return []
    own = unpushed_changed_lines(repo, files)
    if since is not None:  # the range where the repro began to fail: every changed line a failing run ran counts
        for file, changed in changed_lines_since(repo, since.commit, files).items():
            own.setdefault(file, set()).update(changed)
    hits = changed_lines_ran(mine, own, SPECTRUM_FORMULA, own=True)
    hits += [h for h in changed_lines_ran(mine, recently_changed_lines(repo, files), SPECTRUM_FORMULA)
             if h.line not in own.get(h.file, ())]
    hits.sort(key=lambda h: -h.score)
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
    passing = len(mine) - failing
    out = []
    for (file, function), lines in found.items():
        top = lines[0]
        numbers = ", ".join(str(h.line) for h in sorted(lines, key=lambda h: h.line)[:6])
        ran = (f"ran in {top.failed_runs}/{failing} failing runs and no run passed" if not passing else
               f"ran in {top.failed_runs}/{failing} failing and {top.passed_runs}/{passing} passing runs "
               f"({SPECTRUM_FORMULA} {top.score:.2f})")
        whose = ("" if top.line not in own.get(file, ()) else
                 f"; changed since good_ref {since.ref}, where the repro passed, so it counts whatever the passing "
                 "runs ran" if since is not None else
                 "; the change is yours (no remote branch holds it), so it counts whatever the passing runs ran")
        out.append(ChangedRan(file, top.line, function, f"changed lines {numbers} {ran}{whose}"))
    return out


def _reproduction_errors(state: AppState, ref: Reference) -> str:
    for run_id in ref.run_ids[:1]:
        try:
            run = state.store.get_run(run_id, ref.case_id)
        except Exception:  # noqa: BLE001 - a missing run only loses its frames
            return ""
        return read_tail(Path(run.stderr_path), 4 * 1024 * 1024) or "" if run.stderr_path else ""
    return ""
