"""Who wrote the line of FX-generated code that raised.

An exception raised in the Python code FX generates for a graph (`<eval_with_key>.N`), or in calling it with
arguments its `def` does not take, names no torch function: the code's author is FX's code generation, which is
no longer on the stack. The spectrum probe's `--fx-writers` run records which function of torch/fx wrote each
fragment of that code; these functions read the record. The suspects, most likely first:
- for a None used on the failing line: the writer of the generated statement that set that name to None;
- for a call that binds its arguments wrong: the writer of the generated `def`.
The failing statement's own writer is no suspect: FX writes every call of a graph the same way (`emit_node`), so
an op that raised on it says the graph is wrong, not its code; the note names the line for the agent to read.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from pt2_bug_basher.analysis.failure import parse
from pt2_bug_basher.domain.evidence import Suspect

GENERATED_FILE = "<eval_with_key>"
GENERATED_FRAME = re.compile(r'File "<eval_with_key>\.\d+", line \d+, in (?!<module>)')
# a frame FX printed, and its code line
PRINTED_FRAME = re.compile(r'File "(?P<file><eval_with_key>\.\d+)", line (?P<line>\d+), in (?!<module>)\S+\n'
                           r'(?P<text>[^\n]*)')
NONE_USED = re.compile(r"'NoneType'|\bNone\b")
# a call to a graph module's generated forward whose arguments its def does not bind
BAD_BINDING = re.compile(r"\b(?P<fn>forward)\(\) (takes \d+ positional|missing \d+ required|"
                         r"got an unexpected keyword|got multiple values)")
MAX_WRITERS = 3
APPENDED, RETURNED = "append", "return"


@dataclass(frozen=True)
class Fragment:
    """A piece of the generated code and the torch/fx function (and line) that appended or returned it."""

    file: str
    function: str
    first_line: int
    line: int
    text: str
    kind: str = RETURNED


def raised_in_fx_code(error_text: str) -> bool:
    """Whether a record of the code's writers can name one: the run's exception used a None in FX-generated code,
    or bound its arguments wrong calling it. Any other exception there (an op that raised on a statement FX
    wrote as it writes every call) asks for no run."""
    parsed = parse(error_text)
    messages = [b.exc.message or "" for b in parsed.blocks if b.exc is not None]
    # the frame is also in the traceback FX prints itself before re-raising
    if GENERATED_FRAME.search(error_text) and any(NONE_USED.search(m) for m in messages):
        return True
    exc = parsed.final_exc
    return exc is not None and exc.type in ("TypeError", "builtins.TypeError") and \
        BAD_BINDING.search(exc.message or "") is not None


def _fragments(graph: dict) -> list[Fragment]:
    out = []
    for row in graph.get("fragments") or []:
        if isinstance(row, list) and len(row) == 6 and all(isinstance(v, str) for v in (row[0], row[1], row[4])):
            out.append(Fragment(row[0], row[1], int(row[2]), int(row[3]), row[4], str(row[5])))
    return out


def failing_lines(report: dict, error_text: str = "") -> list[dict]:
    """The generated code's frames the exception went through, innermost first: the probe's, else those the
    run printed (FX prints the generated code's traceback itself, then re-raises without it)."""
    failing = [f for f in report.get("failing") or [] if isinstance(f, dict) and isinstance(f.get("line"), int)]
    if failing:
        return failing
    printed = [{"file": m["file"], "line": int(m["line"]), "text": m["text"]}
               for m in PRINTED_FRAME.finditer(error_text)]
    return printed[::-1]


def _graph(report: dict, failing: list[dict]) -> dict | None:
    """The reported graph whose code raised: the latest with the failing text at the failing line (any graph,
    for a call that could not bind: the latest)."""
    graphs = [g for g in report.get("graphs") or [] if isinstance(g, dict) and isinstance(g.get("src"), str)]
    for graph in reversed(graphs):
        if not failing:
            return graph
        lines, line = graph["src"].split("\n"), failing[0]["line"]
        if 0 < line <= len(lines) and lines[line - 1].strip() == str(failing[0].get("text") or "").strip():
            return graph
    return None


def writer_of(text: str, fragments: list[Fragment]) -> Fragment | None:
    """The fragment that wrote `text`: of those that hold it, an appended one (the code's own lines) before a
    returned one (which may only pass the text on), then the shortest, then the first written."""
    text = text.strip()
    if not text:
        return None
    holding = [(i, f) for i, f in enumerate(fragments) if text in f.text]
    if not holding:
        return None
    return min(holding, key=lambda item: (item[1].kind != APPENDED, len(item[1].text), item[0]))[1]


def _statements(line: str) -> list[str]:
    """The statements of one generated line (`a = b + 1;  b = None`)."""
    return [part.strip() for part in line.split(";") if part.strip()]


def _loads(statement: str) -> set[str]:
    try:
        tree = ast.parse(statement)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _set_to_none(statement: str) -> set[str]:
    """The names a statement assigns None (`a = b = None`)."""
    try:
        tree = ast.parse(statement)
    except SyntaxError:
        return set()
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is None:
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out


def _suspect(fragment: Fragment, why: str) -> Suspect:
    return Suspect(file=fragment.file, line=fragment.line, function=fragment.function, why=why,
                   evidence=["fx_codegen"])


def fx_writer_suspects(report: dict, error_text: str = "") -> list[Suspect]:
    """The functions that wrote the generated code's failing lines, most likely first (see the module).
    `error_text`: the recording run's stderr, for the frames FX printed itself."""
    failing = failing_lines(report, error_text)
    graph = _graph(report, failing)
    if graph is None:
        return []
    fragments = _fragments(graph)
    lines = graph["src"].split("\n")
    message = str(report.get("message") or "")
    out: list[Suspect] = []
    if failing:
        where, text = failing[0]["line"], str(failing[0].get("text") or "")
        statement = next(iter(_statements(text)), "")
        place = f"{failing[0].get('file', GENERATED_FILE)} line {where}"
        if NONE_USED.search(message):
            used = _loads(statement)
            # the last generated statement above the failing line that set one of its names to None
            for number in range(min(where - 1, len(lines)), 0, -1):
                found = [s for s in _statements(lines[number - 1]) if _set_to_none(s) & used]
                writer = writer_of(found[-1], fragments) if found else None
                if writer is not None:
                    names = ", ".join(sorted(_set_to_none(found[-1]) & used))
                    out.append(_suspect(writer, f"wrote `{found[-1]}` into the code FX generated (line {number}), "
                                                f"and {place} then used `{names}`: {message[:120]}"))
                    break
    else:
        bad = BAD_BINDING.search(message)
        header = next((line for line in lines if bad is not None and line.lstrip().startswith(f"def {bad['fn']}(")),
                      None)
        writer = writer_of(header, fragments) if header is not None else None
        if header is not None and writer is not None:
            out.append(_suspect(writer, f"wrote `{header.strip()[:80]}`, the def of the FX-generated code whose call "
                                        f"failed to bind its arguments: {message[:120]}"))
    unique: list[Suspect] = []
    for s in out:
        if (s.file, s.function) not in {(u.file, u.function) for u in unique}:
            unique.append(s)
    return unique[:MAX_WRITERS]


def generated_code_note(report: dict, error_text: str = "") -> str | None:
    """Where in FX-generated code it raised, for the agent to read; None when it raised outside such code."""
    failing = failing_lines(report, error_text)
    if not failing:
        return None
    first = failing[0]
    return (f"The exception was raised in code FX generated ({first.get('file')}, line {first.get('line')}: "
            f"`{str(first.get('text') or '').strip()[:120]}`); print the graph module's `.code` to read it whole.")
