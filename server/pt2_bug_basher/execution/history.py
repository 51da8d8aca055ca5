"""Which commits of HEAD last changed the suspect functions: a regression's likeliest cause, read with git blame."""

from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pt2_bug_basher.analysis.spectra import FunctionSpan, function_spans
from pt2_bug_basher.analysis.suspects import enclosing_function
from pt2_bug_basher.domain.evidence import Suspect
from pt2_bug_basher.execution.gitstate import RECENT_COMMITS, RecentChange, recent_change

MAX_BLAMED = 3  # suspects whose recent history is read (git blame of each function, four at a time)


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
        return "in the working tree" if self.change.uncommitted else "HEAD itself" if back == 0 else \
            f"{back} commit(s) before HEAD"

    def by(self) -> str:
        return "uncommitted edits" if self.change.uncommitted else f"{self.change.commit} \"{self.change.subject}\""

    def read(self) -> str:
        """The git command that shows the change."""
        return f"git diff -- {shlex.quote(self.file)}" if self.change.uncommitted else f"git show {self.change.commit}"


def recent_changes(repo: Path, places: list[tuple[str, int, str]],
                   reached: dict[tuple[str, str], str] | None = None,
                   within: int = RECENT_COMMITS) -> list[FunctionChange]:
    """The suspect functions that one of the last commits of HEAD changed (a regression's likeliest cause),
    most recently changed first. Functions outside the repository, or changed long ago, are left out."""
    spans: dict[str, list[FunctionSpan]] = {}  # each file read and parsed once
    functions: dict[tuple[str, int, int], str] = {}
    for file, line, function in places:
        path = repo / file
        if file not in spans and path.is_file():
            spans[file] = function_spans(path.read_text(errors="replace"))
        if file in spans:
            first, last = enclosing_function(spans[file], line)
            functions.setdefault((file, first, last), function)
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = list(pool.map(lambda place: recent_change(repo, place[0], place[1], place[2], within=within),
                              functions))
    how = reached or {}
    changes = [FunctionChange(file, first, last, function, change, how.get((file, function)))
               for ((file, first, last), function), change in zip(functions.items(), found, strict=True) if change]
    return sorted(changes, key=lambda c: c.change.commits_before_head)


def change_sentence(c: FunctionChange) -> str:
    return (f"{c.function} ({c.file}:{c.first}-{c.last}) was changed by {c.by()} ({c.change.date}, {c.when()}, "
            f"within the last {RECENT_COMMITS}): read that change first ({c.read()}).")


def holds(change: FunctionChange, suspect: Suspect) -> bool:
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
        said = f"changed by {c.by()} ({c.when()})"
        held = [s for s in rest if holds(c, s)]
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


def blamed_first(repo: Path, suspects: list[Suspect]) -> tuple[list[Suspect], list[FunctionChange]]:
    """The first suspects' recent changes, and the suspects with the changed functions moved first."""
    changes = recent_changes(repo, [(s.file, s.line, s.function) for s in suspects[:MAX_BLAMED] if s.line])
    return changed_first(suspects, changes), changes
