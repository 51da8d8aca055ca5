"""Parse the error output of a failed run into a compact failure record.

Pure text processing: no subprocess, no torch import. The parser reads what Python, Dynamo,
Inductor, faulthandler and common wrappers print:

* standard tracebacks (``Traceback (most recent call last):``), with chained exceptions ("The above
  exception was the direct cause ..." / "During handling of ..."): the last exception is the one
  raised to the user, the chain is kept (outermost first);
* tracebacks inside log records (``[rank0]:``, glog-style ``E0619 11:51:41.16 123 file.py:894]``,
  vLLM worker prefixes, pytest ``E   `` lines): the prefix is stripped;
* IPython / Jupyter / Colab tracebacks (``File /path.py:324, in func(...)``, ``--> 324 code``,
  final ``InductorError: CppCompileError: ...`` without the module path);
* Dynamo's trailing sections: ``from user code:`` frames (used for ``user_frame``) and hint lines
  (``Set TORCHDYNAMO_VERBOSE=1 ...``) that end the message;
* Inductor errors followed by long compiler output (the message keeps only its first lines);
* tracebacks cut at either end (excerpts), whose frames are still read;
* crashes by signal (``Fatal Python error: Segmentation fault`` and faulthandler's
  ``File "...", line N in func`` frames, most recent call first).

The signature is stable across runs of the same failure: addresses, temporary paths, Inductor
cache keys, PIDs, timings, counters and line numbers are normalised away before hashing.
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

MESSAGE_LIMIT = 800
_MAX_BLOCK_LINES = 4000  # lines read from one traceback block before giving up on it
_MAX_MESSAGE_LINES = 40
_MAX_CHAIN = 12
_HEADERLESS_WINDOW = 64 * 1024  # bytes read back from the end for tracebacks without a header
_CRASH_WINDOW = 256 * 1024  # bytes read back from the end for fatal-signal reports


class Frame(BaseModel):
    file: str
    line: int
    function: str
    code: str | None = None
    in_torch: bool

    def in_generated_code(self) -> bool:
        """A frame of code Inductor generated and runs (its cache: /tmp/torchinductor_<user>/...), or of an
        FX graph module's generated forward; not a module-level frame, which is the code being loaded."""
        path = self.file.replace("\\", "/")
        return (bool(GENERATED_DIR.search(path)) or "<eval_with_key>" in path) and self.function != "<module>"


# the Inductor cache directories (TORCHINDUCTOR_CACHE_DIR) of a case's runs and of its bisection's trials,
# in the case's directory
CASE_INDUCTOR_CACHE = "inductor-cache"
CASE_BISECT_CACHE = "bisect-cache"
# Inductor's cache of generated code: the default /tmp/torchinductor_<user>/..., or a case's; not a file named
# test_torchinductor.py
GENERATED_DIR = re.compile(rf"(?:^|/)(?:torchinductor[^/]*|{CASE_INDUCTOR_CACHE}|{CASE_BISECT_CACHE})/")


class FailureRecord(BaseModel):
    exception_type: str | None
    message: str | None
    user_frame: Frame | None
    torch_frame: Frame | None
    signature: str
    chained: list[str]
    signal_name: str | None = None


# --------------------------------------------------------------------------------------------
# Line-level patterns (all anchored or literal-led: no nested ambiguous quantifiers)

_LOG_PREFIX = re.compile(
    r"^(?:"
    r"\[rank\d+\]:\s?"  # torchrun
    r"|\(\w+ pid=\d+\) \w+ [\d-]+ [\d:]+ [\w.]+:\d+\] "  # vLLM worker
    r"|[VIWEDF]\d{4} [\d:.]+ +\d+ [^\s\]]+:\d+\] (?:\[[\d/_]+\] )?(?:\[__\w+\] )?"  # glog / TORCH_LOGS
    r"|\[[\d-]+ [\d:,.]+\] [\w.]+: \[\w+\] "  # python logging with torch's default format
    r"|E {3}"  # pytest failure lines ("E   " + the original line)
    r"|\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z | +)(?:\[rank\d+\]:\s?)?"  # timestamped container logs
    r")"
)
# A Python traceback frame: `  File "x.py", line 3, in f` (faulthandler prints `line 3 in f`; `in` may be
# missing). The one frame pattern of the package: the log parser and the pytest reader use it too.
FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:,? in (?P<func>.+?))?\s*$')
# IPython prints `File /path.py:324, in f(...)`; JupyterLab links it: `File [~/p.py:324](http://...), in f(...)`
_FRAME_IPY = re.compile(r"^File \[?(?P<file>[^\s\[\]]+?):(?P<line>\d+)(?:\]\([^)\s]*\))?, "
                        r"in (?P<func>[\w.<>\[\]]+)")
# Colab links the file: `[/usr/lib/x.py](https://localhost:8080/#) in f(...)`; older IPython prints
# `~/envs/lib/x.py in f(...)` (the name wrapped onto the next line when long), indented when pasted inside a quote
_FRAME_COLAB = re.compile(r"^\s*\[?(?P<file>~?/\S+?\.py)(?:\]\([^)\s]*\))? in(?: (?P<func>[\w.<>]+)|\s*$)")
_FRAME_PYTEST = re.compile(r"^(?P<file>\S+\.py):(?P<line>\d+): in (?P<func>[\w.<>]+)\s*$")
_IPY_ARROW = re.compile(r"^-+> ?(?P<line>\d+)\s?(?P<code>.*)$")
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::(?: (?P<msg>.*)|$))")
_BARE_TYPE = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\s*$")
_IPY_HEADER = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)\s{2,}$")
# an exception line alone (pytest's `E   `, or pasted as a comment in the repro: `    # KeyError: ...`)
_QUALIFIED_EXC = re.compile(
    r"^(?:E\s+|[^\S\n]*#[^\S\n]*)?(?P<type>(?:[a-z_]\w*\.)+[A-Z]\w*|[A-Z]\w*(?:Error|Exception|Unsupported|Failed|Exit))"
    r": (?P<msg>\S.*)$",
    re.M,
)
_CHAIN_CAUSE = "The above exception was the direct cause of the following exception"
_CHAIN_CONTEXT = "During handling of the above exception, another exception occurred"
_TB_HEADER = "Traceback (most recent call last)"
_FH_HEADER = "(most recent call first)"
_MESSAGE_END = (
    "from user code:",
    "Set TORCHDYNAMO_VERBOSE",
    "Set TORCH_LOGS=",
    "You can suppress this exception",
    "Traceback (most recent call last)",
    _CHAIN_CAUSE,
    _CHAIN_CONTEXT,
    "The error above occurred when calling torch.export",
    "The following call raised this error",
    "To execute this test, run the following",
)
_SIGNALS = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV",
            15: "SIGTERM"}
# signals a process usually gets from outside (a timeout, the OOM killer, Ctrl-C), not from a bug
EXTERNAL_SIGNALS = frozenset({"SIGKILL", "SIGTERM", "SIGINT", "SIGHUP"})
_FATAL_TO_SIGNAL = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Illegal instruction": "SIGILL",
    "Floating point exception": "SIGFPE",
}
_FATAL = re.compile(r"Fatal Python error: (?P<what>[^\n]+)")
_GDB_SIGNAL = re.compile(r"received signal (?P<sig>SIG[A-Z]+)")
_DIAGNOSTIC = re.compile(r":\d+(?::\d+)?: (?:fatal )?error: ")
_SHELL_SIGNAL = re.compile(r"^(?P<what>Segmentation fault|Aborted|Bus error|Illegal instruction)"
                           r"(?: \(core dumped\))?\s*$", re.M)

# --------------------------------------------------------------------------------------------
# Frame classification

_TORCH_PATH = re.compile(r"(?:^|[/\\])torch[/\\]")
_LIB_PATH = re.compile(
    r"(?:[/\\](?:site|dist)-packages[/\\]"
    r"|[/\\]lib[/\\]python\d[\d.]*[/\\]"
    r"|^<frozen |^<string>|^<eval_with_key>|^<built-in|^<decorator"
    r"|[/\\]torchinductor_[^/\\]*[/\\]"
    r"|[/\\]triton[/\\](?:compiler|runtime|language|backends|_C)[/\\]|[/\\]triton[/\\]compiler\.py$"
    r"|[/\\]python[/\\]triton[/\\]"
    r"|^\.\.\.)"
)
_STDLIB_NAMES = re.compile(r"(?:^|[/\\])(?:runpy|contextlib|functools|threading|concurrent[/\\]futures[/\\]\w+"
                           r"|multiprocessing[/\\]\w+|unittest[/\\]\w+|asyncio[/\\]\w+)\.py$")


_PACKAGE_OF = re.compile(r"[/\\](?:site|dist)-packages[/\\]([^/\\]+)")


def _in_torch(path: str) -> bool:
    """torch's own file: an installed one is torch's package, wherever the environment lives (a venv under a
    folder named `torch` holds Triton too); a develop checkout's has a `torch/` folder in its path."""
    installed = _PACKAGE_OF.findall(path)
    if installed:
        return installed[-1] == "torch"
    return bool(_TORCH_PATH.search(path)) or path.startswith(("torch/", "..../torch/"))


def is_user_path(path: str) -> bool:
    """True for a frame in the user's own code: not torch, not an installed package, not stdlib."""
    if _in_torch(path) or _LIB_PATH.search(path) or _STDLIB_NAMES.search(path):
        return False
    return not path.startswith(("<", "/tmp/torchinductor"))


# --------------------------------------------------------------------------------------------
# Normalisation

_NORMALISERS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\x1b\[[0-9;]*[A-Za-z]"), ""),  # ANSI colours
    (re.compile(r"(?:/private)?/var/folders/\S+|/tmp/\S+|[A-Za-z]:\\Users\\[^\\\s]+\\AppData\\Local\\Temp\\\S+"
                r"|\S*torchinductor_\w+\S*|\S*pytest-of-\w+\S*|\S*pt2bb_corpus_\w+\S*"), "<tmp>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"\b[a-z0-9]{40,}\b"), "<hash>"),  # Inductor cache keys, sha digests
    (re.compile(r"\b[0-9a-f]{16,}\b"), "<hash>"),
    (re.compile(r"\b(pid[=_ :]?|PID[=_ :]?|process )\d+"), r"\1N"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|us|µs|ns|s|sec|secs|seconds|minutes)\b"), "<t>"),
    (re.compile(r"\b\d{4}[-_]\d\d[-_]\d\d[-_T ][\d:_.]+"), "<date>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(?:[.,]\d+)?"), "<time>"),
    (re.compile(r"\b(__compiled_fn|__resume_at|_compiled_fn|graph|kernel|model__)_?\d+(?:_\d+)*"), r"\1_N"),
    (re.compile(r"\b((?:triton|cpp)_(?:poi|red|per|tem|fused|helper)\w*?)_\d+\b"), r"\1_N"),
    (re.compile(r"<eval_with_key>\.\d+"), "<eval_with_key>.N"),
    (re.compile(r"\[\d+/\d+(?:_\d+)?\]"), "[N/N]"),
    (re.compile(r"\b(id|object id|ids?)[= ]\d+"), r"\1=N"),
    (re.compile(r"(\.py)(?::\d+|\", line \d+)"), r"\1:N"),
    (re.compile(r"\bline \d+"), "line N"),
    (re.compile(r"(?:/[^\s/'\"():,\]]+)+/([^\s/'\"():,\]]+)"), r"\1"),  # absolute paths -> basename
    (re.compile(r"[-+]?\b\d+\.\d+(?:[eE][-+]?\d+)?\b|\b\d+[eE][-+]?\d+\b"), "<f>"),  # float values
    (re.compile(r"\bat index \([\d, ]*\)"), "at index (N)"),
    (re.compile(r"[ \t]+"), " "),
]


# For signatures only: the numbers a run picks (sizes, values, counts, tensor reprs) vary between runs
# of one failure; the words, the exception type and the frames tell two failures apart.
_TENSOR_REPR = re.compile(r"\btensor\((?:[^()]|\([^()]*\))*(?:\)|$)", re.S)  # a repr may span lines
_NUMBER_NORMALISERS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"[-+]?\b\d+\.<hash>"), "N"),  # a float with 16+ decimals, taken for a digest
    (_TENSOR_REPR, "tensor(...)"),
    (re.compile(r"\b\d+(?:[xX]\d+)+\b"), "N"),  # 3x4 sizes
    (re.compile(r"[-+]?(?<![A-Za-z_\d])(?!0x\?)\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\binf\b|\bnan\b"), "N"),
    (re.compile(r"(?:<f>|N)(?:\s*(?:,|x|X|\*)\s*(?:<f>|N))+"), "N"),
]


def normalise_numbers(msg: str) -> str:
    """normalise_message's output with every number (and tensor repr) replaced: one key for one failure."""
    out = msg
    for pat, repl in _NUMBER_NORMALISERS:
        out = pat.sub(repl, out)
    return out.replace("<f>", "N")


def normalise_message(msg: str) -> str:
    """Strip run-specific noise (addresses, temp paths, cache keys, PIDs, timings, counters,
    line numbers, absolute directories, float values) from an error message."""
    out = msg
    for pat, repl in _NORMALISERS:
        out = pat.sub(repl, out)
    return out.strip()


# --------------------------------------------------------------------------------------------
# Internal parse result (also used by classify)


@dataclass
class _Exc:
    type: str | None
    message: str
    line_no: int  # 0-based line index in the whole text (-1 when unknown)
    line: str  # verbatim line
    diagnostics: list[str] = field(default_factory=list)  # compiler "error:" lines in the message


@dataclass
class _Block:
    frames: list[Frame] = field(default_factory=list)
    frame_lines: list[tuple[int, str]] = field(default_factory=list)  # (0-based line, verbatim line)
    exc: _Exc | None = None
    user_code_frames: list[Frame] = field(default_factory=list)


@dataclass
class ParsedFailure:
    blocks: list[_Block]  # chain order as printed (innermost cause first, final exception last)
    signal_name: str | None
    fatal_line: tuple[int, str] | None  # (0-based line index, verbatim line) of a fatal/signal line
    wrapped_types: list[str]  # exception types named at the start of wrapper messages

    @property
    def final_exc(self) -> _Exc | None:
        for b in reversed(self.blocks):
            if b.exc is not None:
                return b.exc
        return None

    def all_frames(self) -> list[Frame]:
        out: list[Frame] = []
        for b in self.blocks:
            out.extend(b.frames)
        return out


class _Lines:
    """Lazy line access from an offset in a big text, with 0-based line numbers computed once."""

    def __init__(self, text: str, start: int, start_line_no: int) -> None:
        self.text = text
        self.pos = start
        self.line_no = start_line_no

    def next(self) -> tuple[int, str] | None:
        if self.pos >= len(self.text):
            return None
        end = self.text.find("\n", self.pos)
        if end < 0:
            end = len(self.text)
        line = self.text[self.pos:end]
        if line.endswith("\r"):
            line = line[:-1]
        no = self.line_no
        self.pos = end + 1
        self.line_no += 1
        return no, line


def strip_prefix(line: str) -> str:
    """The line without its log prefix; torchrun's `[rank0]:` may stand before another one (`[rank0]:E1010 ...]`)."""
    for _ in range(2):
        if not line or not (line[0] in "[(VIWEDF" or line[0].isdigit()):
            break
        m = _LOG_PREFIX.match(line)
        if not m or not m.end():
            break
        line = line[m.end():]
    return line


def _frame_from_match(m: re.Match[str]) -> Frame:
    file = m.group("file")
    try:
        ln = int(m.group("line")) if "line" in m.groupdict() and m.group("line") else 0
    except (IndexError, ValueError):
        ln = 0
    func = (m.group("func") or "?").strip()
    return Frame(file=file, line=ln, function=func[:200], in_torch=_in_torch(file))


def match_frame(s: str) -> re.Match[str] | None:
    c = s.lstrip()[:1]
    if c == "F":
        return FRAME_LINE.match(s) or _FRAME_IPY.match(s)
    if c in "[/~":
        return _FRAME_COLAB.match(s) or _FRAME_PYTEST.match(s)
    if s and not s[0].isspace() and ".py:" in s:
        return _FRAME_PYTEST.match(s)
    return None


def _split_exc(s: str) -> tuple[str | None, str]:
    m = _EXC_LINE.match(s)
    if m and (m.group("type")[:1].isupper() or "." in m.group("type")):
        last = m.group("type").rsplit(".", 1)[-1]
        if last[:1].isupper() or last.endswith(("Error", "Exception")):
            return m.group("type"), (m.group("msg") or "")
    m = _BARE_TYPE.match(s)
    if m:
        return m.group("type"), ""
    return None, s


def _is_message_end(s: str) -> bool:
    return s.startswith(_MESSAGE_END) or any(s.lstrip().startswith(e) for e in _MESSAGE_END[:4])


def _read_user_code(lines: _Lines, block: _Block, limit: int = 200) -> tuple[int, str] | None:
    """Read the frames of a 'from user code:' section; returns the first line after it."""
    last_frame: Frame | None = None
    for _ in range(limit):
        item = lines.next()
        if item is None:
            return None
        no, raw = item
        s = strip_prefix(raw)
        m = FRAME_LINE.match(s)
        if m:
            last_frame = _frame_from_match(m)
            block.user_code_frames.append(last_frame)
            continue
        if not s.strip():
            if block.user_code_frames:
                return item
            continue
        if s.startswith((" ", "\t")) or (last_frame is not None and last_frame.code is None
                                           and not _is_message_end(s)):
            if last_frame is not None and last_frame.code is None and s.strip().strip("^~ "):
                last_frame.code = s.strip()[:300]
            continue
        return item
    return None


@dataclass
class _BlockState:
    """What _parse_block has read of one traceback block so far."""

    block: _Block
    lines: _Lines
    header: bool  # the block's first line is its header (`Traceback (most recent call last):`)
    jupyter_type: str | None
    last_frame: Frame | None = None
    exc: _Exc | None = None
    msg_lines: list[str] = field(default_factory=list)
    msg_len: int = 0
    in_message: bool = False
    blank_run: int = 0
    logged: bool | None = None  # whether the block's own lines carry a log prefix (a traceback that was logged)


# what a line tells _parse_block: read the next one, stop, or stop before the line (a new excerpt starts there)
_LineOutcome = Literal["next", "stop", "new_excerpt"]


def _parse_block(text: str, start: int, start_line_no: int, stop: int, *, jupyter_type: str | None,
                 first_line_is_header: bool) -> tuple[_Block, int, int]:
    """Parse one traceback block from text[start:stop].

    Returns the block, and the offset and line number where parsing stopped: the end of the
    region, or (for blocks without header) the first frame of a following traceback.
    """
    st = _BlockState(_Block(), _Lines(text, start, start_line_no), first_line_is_header, jupyter_type)
    lines = st.lines
    if first_line_is_header:
        header = lines.next()
        st.logged = header is not None and strip_prefix(header[1]) != header[1]
    count = 0
    while lines.pos < stop and count < _MAX_BLOCK_LINES:
        line_pos, line_no0 = lines.pos, lines.line_no
        item = lines.next()
        if item is None:
            break
        count += 1
        no, raw = item
        s = strip_prefix(raw if len(raw) <= 4000 else raw[:4000])
        if st.logged is None and s.strip():
            st.logged = s != raw[:4000]
        if st.in_message and st.msg_lines and not st.logged and s != raw[:4000]:
            # a log record after an unlogged traceback's message (TORCHDYNAMO_VERBOSE's compilation metrics,
            # printed at exit) is not part of the message
            st.in_message = False
            outcome = _after_message_line(st, s)
        elif st.in_message:
            outcome = _message_line(st, s)
        elif st.exc is not None:
            outcome = _after_message_line(st, s)
        else:
            outcome = _frames_line(st, no, raw, s)
        if outcome == "new_excerpt":
            lines.pos, lines.line_no = line_pos, line_no0
        if outcome != "next":
            break
    st.block.exc = _finished_exc(st, start_line_no)
    return st.block, lines.pos, lines.line_no


def _message_line(st: _BlockState, s: str) -> _LineOutcome:
    """A line of the exception's message, or the line that ends it."""
    if _is_message_end(s):
        st.in_message = False
        if s.startswith("from user code:") and _read_user_code(st.lines, st.block) is None:
            return "stop"
        return "next"
    if not s.strip():
        st.blank_run += 1
        if st.blank_run >= 3:
            st.in_message = False
        return "next"
    if not st.header and st.blank_run and match_frame(s):
        return "new_excerpt"
    exc = st.exc
    if exc is not None and len(exc.diagnostics) < 3 and "error: " in s and _DIAGNOSTIC.search(s):
        exc.diagnostics.append(s.strip()[:300])
    if len(st.msg_lines) < _MAX_MESSAGE_LINES and st.msg_len < MESSAGE_LIMIT:
        if st.blank_run:
            st.msg_lines.append("")
        st.msg_lines.append(s.rstrip())
        st.msg_len += len(s)
    st.blank_run = 0
    return "next"


def _after_message_line(st: _BlockState, s: str) -> _LineOutcome:
    """A line after the message: a user-code section, or (without header) a new excerpt."""
    if s.startswith("from user code:"):
        _read_user_code(st.lines, st.block)
    elif not st.header and match_frame(s):
        return "new_excerpt"
    return "next"


def _frames_line(st: _BlockState, no: int, raw: str, s: str) -> _LineOutcome:
    """A line before the exception line: a frame, its code, a line to skip, or the exception line."""
    if not s.strip():
        return "next"
    m = match_frame(s)
    if m:
        st.last_frame = _frame_from_match(m)
        st.block.frames.append(st.last_frame)
        st.block.frame_lines.append((no, raw))
        return "next"
    last_frame = st.last_frame
    ls = s.lstrip()
    if ls.startswith("->") or ls.startswith("-->"):  # IPython marks the line: `-> 3048` (JupyterLab), `---> 15`
        am = _IPY_ARROW.match(ls)
        if am and last_frame is not None:
            if not last_frame.line:
                last_frame.line = int(am.group("line"))
            if last_frame.code is None:
                last_frame.code = am.group("code").strip()[:300] or None
        return "next"
    if s[0] in " \t":
        if last_frame is not None and last_frame.code is None:
            code = ls.strip()
            if code and code.strip("^~ ") and not code[:1].isdigit():
                last_frame.code = code[:300]
        return "next"
    if ls.startswith(("(...)", "[... skipping", "... ", "-----")) or ls.endswith(" frames"):
        return "next"
    if ls.startswith(("During handling", "The above exception")):
        return "next"
    # a column-0 line that is not a frame: the exception line (if it looks like one)
    etype, emsg = _split_exc(s)
    if etype is None and (st.jupyter_type or not st.block.frames or not st.header):
        return "next"
    st.exc = _Exc(type=etype, message=emsg, line_no=no, line=raw)
    st.msg_lines = [emsg.rstrip()] if emsg else []
    st.msg_len = len(emsg)
    st.in_message = True
    st.blank_run = 0
    return "next"


def _finished_exc(st: _BlockState, start_line_no: int) -> _Exc | None:
    """The block's exception with its whole message; a Jupyter header's type when no exception line was read."""
    exc = st.exc
    if exc is not None:
        msg_lines = st.msg_lines
        while msg_lines and not msg_lines[-1].strip():
            msg_lines.pop()
        if exc.diagnostics and not any(d in msg_lines for d in exc.diagnostics):
            # keep the compiler's own error lines even when the command line fills the message
            msg_lines[1:1] = exc.diagnostics
        exc.message = "\n".join(msg_lines)[:MESSAGE_LIMIT]
    elif st.jupyter_type:
        exc = _Exc(type=st.jupyter_type, message="", line_no=start_line_no, line="")
    return exc


def _line_start(text: str, pos: int) -> int:
    return text.rfind("\n", 0, pos) + 1


class LineIndex:
    """0-based line numbers of offsets in a big text, counted from the nearest known offset
    (one pass over the text at most, however many lookups)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._pos = [0]
        self._line = [0]

    def line_of(self, pos: int) -> int:
        pos = max(0, min(pos, len(self.text)))
        i = bisect.bisect_right(self._pos, pos) - 1
        below_pos, below_line = self._pos[i], self._line[i]
        if i + 1 < len(self._pos) and self._pos[i + 1] - pos < pos - below_pos:
            above_pos, above_line = self._pos[i + 1], self._line[i + 1]
            line = above_line - self.text.count("\n", pos, above_pos)
        else:
            line = below_line + self.text.count("\n", below_pos, pos)
        self._pos.insert(i + 1, pos)
        self._line.insert(i + 1, line)
        return line


def _find_chain_headers(text: str) -> list[int]:
    """Positions (line starts) of the traceback headers of the final exception chain."""
    headers: list[int] = []
    end = len(text)
    while len(headers) < _MAX_CHAIN:
        p = text.rfind(_TB_HEADER, 0, end)
        if p < 0:
            break
        ls = _line_start(text, p)
        headers.append(ls)
        # is this block itself the continuation of a chain? look just before the header
        before = text[max(0, ls - 400):ls]
        if _CHAIN_CAUSE in before or _CHAIN_CONTEXT in before:
            end = ls
            continue
        break
    headers.reverse()
    return headers


_FIRST_FRAME = re.compile(r'^(?:[^\n]{0,160}?\] |\S{0,40}\]: ?|[\d:.TZ -]{19,40} )?'
                          r'(?:[^\S\n]*File "|File \[?[~/.\w]|\[?/\S+\.py\]?[( ]|\S+\.py:\d+: in |E {3,}File "'
                          r'|[^\S\n]*~?/\S+\.py in [\w<])', re.M)


def _headerless_blocks(text: str, end: int, idx: LineIndex) -> list[_Block]:
    """Traceback excerpts without a header in the window before `end` (their frames and
    exception lines), oldest first."""
    lo = max(0, end - _HEADERLESS_WINDOW)
    if text.rfind('File "', lo, end) < 0 and text.rfind("File ", lo, end) < 0 and text.rfind(".py", lo, end) < 0:
        return []
    lo = _line_start(text, lo)
    m = _FIRST_FRAME.search(text, lo, end)
    if m is None:
        return []
    pos = _line_start(text, m.start())
    line_no = idx.line_of(pos)
    blocks: list[_Block] = []
    for _ in range(_MAX_CHAIN * 4):
        if pos >= end:
            break
        blk, npos, nline = _parse_block(text, pos, line_no, end, jupyter_type=None,
                                        first_line_is_header=False)
        if blk.frames or blk.exc:
            blocks.append(blk)
        if npos <= pos:
            break
        pos, line_no = npos, nline
    return blocks[-_MAX_CHAIN:]


def _continued(first: str, text: str, end_of_line: int) -> str:
    """An exception line's message with the lines that continue it, as a traceback would print them (Dynamo's
    `Failed running call_function ...:` gives its reason on the next line): up to a blank line, a frame, a
    log line, another exception line or one of Dynamo's closing sections."""
    lines = [first.rstrip()]
    size = len(first)
    following = text[end_of_line + 1:end_of_line + 1 + 2 * MESSAGE_LIMIT] if end_of_line >= 0 else ""
    for line in following.split("\n")[:_MAX_MESSAGE_LINES]:
        s = strip_prefix(line)
        if (not s.strip() or match_frame(s) or _is_message_end(s) or _QUALIFIED_EXC.match(s) or s != line
                or size >= MESSAGE_LIMIT):
            break
        lines.append(s.rstrip())
        size += len(s)
    return "\n".join(lines)


def _signal_from(exit_code: int | None, signal_name: str | None) -> str | None:
    """The signal that ended the process: given, or read from a subprocess-style negative exit
    code (-11) or a shell-style one (139); 137 and 143 (SIGKILL, SIGTERM) are left alone, as a
    shell also uses them for its own kills."""
    if signal_name:
        return signal_name
    if exit_code is not None:
        if exit_code < 0 and -exit_code in _SIGNALS:
            return _SIGNALS[-exit_code]
        if exit_code > 128 and exit_code - 128 in _SIGNALS and exit_code - 128 not in (9, 15):
            return _SIGNALS[exit_code - 128]
    return None


# Tracebacks rendered by `rich` (box-drawing frames): rewritten line for line into Python's own
# format before parsing, so line numbers stay those of the original text.
_RICH_BORDER = re.compile(r"^(?P<pre>.*?)[│|] ?(?P<body>.*?) *[│|]? *$")
_RICH_FRAME = re.compile(r"^(?P<file>(?:[A-Za-z]:)?[^\s:]+\.py):(?P<line>\d+) in(?: (?P<func>[\w.<>]+))?$")
_RICH_CODE = re.compile(r"^(?:❱|>)? *\d+ [│|] ?(?P<code>.*)$")


def _plain_rich(text: str) -> str:
    """`text` with rich's traceback boxes turned into plain traceback lines (same line count)."""
    if "╭" not in text or "│" not in text or _TB_HEADER not in text:
        return text
    out: list[str] = []
    inside = False
    split_frame = -1  # index in out of a frame line whose function name rich wrapped onto the next line
    for line in text.split("\n"):
        if "╭" in line and _TB_HEADER in line:
            inside = True
            out.append(line[:line.index("╭")] + _TB_HEADER + ":")
            continue
        if not inside:
            out.append(line)
            continue
        m = _RICH_BORDER.match(line)
        if line.lstrip().startswith("╰") or m is None:
            inside = "│" in line  # the outer box ends where a line no longer starts with a border
            out.append("" if "╰" in line or inside else line)
            continue
        pre, body = m.group("pre"), m.group("body").strip()
        if split_frame >= 0:
            if re.fullmatch(r"[\w.<>]+", body):
                out[split_frame] += f", in {body}"
                out.append("")
                split_frame = -1
                continue
            split_frame = -1
        frame = _RICH_FRAME.match(body)
        code = _RICH_CODE.match(body) if frame is None and body.startswith("❱") else None
        if frame:
            func = f", in {frame['func']}" if frame["func"] else ""
            out.append(f'{pre}  File "{frame["file"]}", line {frame["line"]}{func}')
            if not frame["func"]:
                split_frame = len(out) - 1
        elif code:
            out.append(f"{pre}    {code['code'].strip()}")
        else:
            out.append("")
    return "\n".join(out)


# A traceback pasted inside a Markdown quote: `> Traceback ...`, `>    ~/lib/x.py in f(...)` (not `>>>`)
_QUOTED = re.compile(r"^>(?!>) ?", re.M)


def _unquoted(text: str) -> str:
    """`text` with a Markdown quote's `> ` taken off its lines (same line count), when the quote
    holds a traceback: its header or at least three quoted lines."""
    if ">" not in text:
        return text
    quoted = _QUOTED.findall(text, max(0, len(text) - _HEADERLESS_WINDOW))
    if len(quoted) < 3 and "> " + _TB_HEADER not in text:
        return text
    return _QUOTED.sub("", text)


# A paste copied with its line numbers (a file view, an editor): `86   File "x.py", line 114, in run`
_NUMBERED = re.compile(r"^(\d{1,6}) ", re.M)
MIN_NUMBERED_LINES = 5


def _unnumbered(text: str) -> str:
    """`text` with the line numbers a copied view put before every line taken off (same line count): only
    when the text's last lines are numbered one after another, so a printed number is never taken."""
    tail = text[max(0, len(text) - _HEADERLESS_WINDOW):]
    numbers = [int(m.group(1)) for m in _NUMBERED.finditer(tail)]
    lines = [line for line in tail.split("\n") if line.strip()]
    if len(numbers) < MIN_NUMBERED_LINES or len(numbers) < 0.9 * len(lines):
        return text
    if any(b != a + 1 for a, b in zip(numbers, numbers[1:], strict=False)):
        return text
    return _NUMBERED.sub("", text)


def parse(text: str, exit_code: int | None = None, signal_name: str | None = None,
          index: LineIndex | None = None) -> ParsedFailure:
    """Parse error output into blocks of frames and exceptions (internal, richer than the record)."""
    text = _unnumbered(_unquoted(_plain_rich(text)))
    idx = index if index is not None and index.text is text else LineIndex(text)
    crash_lo = max(0, len(text) - _CRASH_WINDOW)  # a process that crashes prints this last
    fatal_line, sig = _fatal(text, idx, crash_lo, _signal_from(exit_code, signal_name))
    blocks = _blocks(text, idx, crash_lo)
    return ParsedFailure(blocks=blocks, signal_name=sig, fatal_line=fatal_line, wrapped_types=_wrapped_types(blocks))


def _fatal(text: str, idx: LineIndex, crash_lo: int, sig: str | None) -> tuple[tuple[int, str] | None, str | None]:
    """The line that says the process died (faulthandler's fatal error, gdb's or the shell's signal), and the
    signal it names when the exit status did not."""
    fatal_line: tuple[int, str] | None = None
    fm = None
    fpos = text.rfind("Fatal Python error: ", crash_lo)
    if fpos >= 0:
        fm = _FATAL.match(text, fpos)
    if fm:
        ls = _line_start(text, fm.start())
        le = text.find("\n", fm.start())
        fatal_line = (idx.line_of(ls), text[ls:le if le >= 0 else len(text)])
        what = fm.group("what").strip()
        for k, v in _FATAL_TO_SIGNAL.items():
            if what.startswith(k):
                sig = sig or v
        return fatal_line, sig
    gpos = text.rfind("received signal SIG", crash_lo)
    if gpos >= 0:
        gm = _GDB_SIGNAL.search(text, gpos)
        if gm:
            sig = sig or gm.group("sig")
            ls = _line_start(text, gpos)
            le = text.find("\n", gpos)
            fatal_line = (idx.line_of(ls), text[ls:le if le >= 0 else len(text)])
    if fatal_line is None:
        tail_start = max(0, len(text) - 4096)
        sm: re.Match[str] | None = None
        for last in _SHELL_SIGNAL.finditer(text, tail_start):
            sm = last
        if sm is not None:
            sig = sig or _FATAL_TO_SIGNAL.get(sm.group("what"))
            fatal_line = (idx.line_of(sm.start()), sm.group(0))
    return fatal_line, sig


def _blocks(text: str, idx: LineIndex, crash_lo: int) -> list[_Block]:
    """The tracebacks: faulthandler's crashing thread, else each chained traceback, else frames and an
    exception line without a header."""
    headers = _find_chain_headers(text)
    blocks: list[_Block] = []
    # faulthandler dumps every thread; the crashing one is the "Current thread"
    fh_pos = text.rfind("Current thread ", crash_lo)
    if fh_pos < 0 or text.find(_FH_HEADER, fh_pos, fh_pos + 200) < 0:
        fh_pos = text.rfind(_FH_HEADER, crash_lo)
    if fh_pos >= 0 and (not headers or fh_pos > headers[-1]):
        ls = _line_start(text, fh_pos)
        blk, _, _ = _parse_block(text, ls, idx.line_of(ls), len(text), jupyter_type=None,
                                 first_line_is_header=True)
        blk.frames.reverse()  # most recent call first -> last
        blk.frame_lines.reverse()
        blk.exc = None
        return [blk]
    if headers:
        for i, h in enumerate(headers):
            stop = headers[i + 1] if i + 1 < len(headers) else len(text)
            hdr_end = text.find("\n", h)
            hdr_line = text[h:hdr_end if hdr_end >= 0 else len(text)]
            jm = _IPY_HEADER.match(hdr_line[:hdr_line.find(_TB_HEADER)])
            blk, _, _ = _parse_block(text, h, idx.line_of(h), stop, jupyter_type=jm.group("type") if jm else None,
                                     first_line_is_header=True)
            blocks.append(blk)
        if blocks[-1].exc is None:
            # the final traceback was cut before its exception line: an excerpt whose
            # exception was printed earlier (e.g. an error logged, then re-raised and cut)
            earlier = [b for b in _headerless_blocks(text, headers[0], idx) if b.exc is not None]
            if earlier:
                blocks.insert(0, earlier[-1])
        return blocks
    blocks = _headerless_blocks(text, len(text), idx)
    if not any(b.exc for b in blocks):
        # an exception line with no traceback at all (excerpts, logged errors)
        tail_start = max(0, len(text) - _HEADERLESS_WINDOW)
        last_exc: re.Match[str] | None = None
        for m in _QUALIFIED_EXC.finditer(text, tail_start):
            last_exc = m
        if last_exc is not None:
            ln = idx.line_of(last_exc.start())
            le = text.find("\n", last_exc.start())
            raw = text[last_exc.start():le if le >= 0 else len(text)]
            message = _continued(last_exc.group("msg"), text, le)
            exc = _Exc(type=last_exc.group("type"), message=message[:MESSAGE_LIMIT], line_no=ln, line=raw)
            blocks.append(_Block(exc=exc))
    return blocks


def _wrapped_types(blocks: list[_Block]) -> list[str]:
    """The exception types a wrapper's message names before the final one ("backend='inductor' raised:
    CppCompileError: ...")."""
    wrapped: list[str] = []
    fe = next((b.exc for b in reversed(blocks) if b.exc is not None), None)
    if fe is None or not fe.message:
        return wrapped
    msg = fe.message
    if msg.startswith("backend=") and "raised:" in msg.split("\n", 1)[0]:
        msg = msg.split("\n", 1)[1] if "\n" in msg else ""
    for _ in range(3):
        t, rest = _split_exc(msg.split("\n", 1)[0])
        if t is None or t == fe.type or len(t) > 120:
            break
        if not (t[:1].isupper() or "." in t):
            break
        wrapped.append(t)
        msg = rest
    return wrapped


# --------------------------------------------------------------------------------------------
# Record


def _pick_user_frame(p: ParsedFailure) -> Frame | None:
    for b in reversed(p.blocks):
        for f in reversed(b.user_code_frames):
            if is_user_path(f.file):
                return f
    for b in reversed(p.blocks):
        for f in reversed(b.frames):
            if is_user_path(f.file):
                return f
    return None


def _pick_torch_frame(p: ParsedFailure) -> Frame | None:
    for b in reversed(p.blocks):
        for f in reversed(b.frames):
            if f.in_torch:
                return f
    return None


def _basename(path: str) -> str:
    return re.split(r"[/\\]", path)[-1]


def _signature_message(message: str | None, diagnostics: list[str] | None = None) -> str:
    """The part of a message that identifies the failure: its first line, plus the line that
    says more where the first one is only a heading (Dynamo's "Explanation:", a line ending in
    ':' such as "backend='inductor' raised:" or Triton's "at 3:25:", a compiler's first error)."""
    if not message:
        return ""
    message = _TENSOR_REPR.sub("tensor(...)", message[:20_000])
    lines = [ln for ln in message.split("\n") if ln.strip()]
    if not lines:
        return ""
    first = lines[0]
    if len(first.strip()) < 3 and len(lines) > 1:
        first, lines = lines[1], lines[1:]
    if len(lines) > 1 and (lines[1].lstrip().startswith("Explanation:") or first.rstrip().endswith(":")):
        first = first + " | " + lines[1].strip()
    if diagnostics:
        first = first + " | " + diagnostics[0]
    return normalise_numbers(normalise_message(first))[:400]


def make_signature(exception_type: str | None, message: str | None, user_frame: Frame | None,
                   torch_frame: Frame | None, signal_name: str | None = None,
                   diagnostics: list[str] | None = None) -> str:
    """``<type>: <message head> @ <file>:<function>#<8 hex>``: readable, and stable across runs
    (the hash covers the type, the normalised message head and both frames' file:function)."""
    norm = _signature_message(message, diagnostics)
    uf = f"{_basename(user_frame.file)}:{user_frame.function}" if user_frame else ""
    tf = f"{_basename(torch_frame.file)}:{torch_frame.function}" if torch_frame else ""
    key = "|".join([signal_name or "", exception_type or "", norm, uf, tf])
    digest = hashlib.sha1(key.encode("utf-8", "replace")).hexdigest()[:8]
    if exception_type:
        head = exception_type.rsplit(".", 1)[-1]
    elif signal_name and norm:
        head = f"{signal_name}: {norm[:60]}"
    elif signal_name:
        head = signal_name
    else:
        head = "<no exception>"
    short = norm.split(" | ")[0]
    if len(short) > 60:
        short = short[:57] + "..."
    readable = f"{head}: {short}" if short and exception_type else head
    where = uf or tf
    if where:
        readable += f" @ {where}"
    return f"{readable}#{digest}"


# what the server's own probes print (the launcher's `PT2BB-COMPILED:` at exit, say): never the program's words
OWN_MARK = "PT2BB-"


def last_line(text: str) -> str:
    """The last non-blank line the program printed (bounded), searched from the end; the probes' lines skipped."""
    end = len(text)
    for _ in range(50):
        start = text.rfind("\n", 0, end)
        line = text[start + 1:end].strip()
        if line and not line.startswith(OWN_MARK):
            return line[:MESSAGE_LIMIT]
        if start < 0:
            break
        end = start
    return ""


def record_from_parsed(p: ParsedFailure, exit_code: int | None = None,
                       last_line: str = "") -> FailureRecord | None:
    user = _pick_user_frame(p)
    torch_f = _pick_torch_frame(p)
    fe = p.final_exc
    if p.signal_name and (fe is None or p.signal_name not in EXTERNAL_SIGNALS):
        message = None
        if p.fatal_line:
            message = p.fatal_line[1].strip()[:MESSAGE_LIMIT]
        elif fe is not None:
            message = (f"{fe.type}: {fe.message}" if fe.type else fe.message)[:MESSAGE_LIMIT]
        return FailureRecord(
            exception_type=None, message=message, user_frame=user, torch_frame=torch_f,
            signature=make_signature(None, None, None, torch_f or user, p.signal_name),
            chained=[b.exc.type for b in reversed(p.blocks) if b.exc and b.exc.type], signal_name=p.signal_name)
    if fe is None:
        frames = p.all_frames()
        if exit_code == 0:
            return None
        if frames and any(not is_user_path(f.file) for f in frames):
            # a traceback cut before its exception line (an excerpt)
            return FailureRecord(
                exception_type=None, message=None, user_frame=user, torch_frame=torch_f,
                signature=make_signature(None, None, user, torch_f), chained=[], signal_name=None)
        if exit_code is None or not last_line:
            return None
        # a non-zero exit with no exception printed: the last line says what happened
        return FailureRecord(
            exception_type=None, message=last_line[:MESSAGE_LIMIT], user_frame=user, torch_frame=torch_f,
            signature=make_signature(None, last_line, user, torch_f, f"exit {exit_code}"), chained=[],
            signal_name=None)
    chained: list[str] = []
    for t in [fe.type, *p.wrapped_types, *(b.exc.type for b in reversed(p.blocks) if b.exc)]:
        if t and t not in chained:
            chained.append(t)
    message = fe.message if fe.type else (fe.message or None)
    return FailureRecord(
        exception_type=fe.type, message=message or None, user_frame=user, torch_frame=torch_f,
        signature=make_signature(fe.type, message, user, torch_f, diagnostics=fe.diagnostics),
        chained=chained, signal_name=p.signal_name)


def parse_failure(text: str, exit_code: int | None = None,
                  signal_name: str | None = None) -> FailureRecord | None:
    """Parse error output (stdout+stderr of a failed run) into a compact failure record.

    Returns None when the text shows no failure: no exception line, no crash signal, and no
    traceback frames (or exit code 0 with frames only).
    """
    if not text and not signal_name and not (exit_code is not None and exit_code < 0):
        return None
    p = parse(text or "", exit_code, signal_name)
    return record_from_parsed(p, exit_code, last_line(text or ""))


# Dynamo hands the captured graph to the backend here; the torch frames allowed between that call and the
# backend's own code are the thin wrappers torch.compile puts around a backend callable.
BACKEND_CALLS = ("call_user_compiler", "_call_user_compiler")
_BACKEND_WRAPPERS = ("torch/__init__.py", "torch/_dynamo/repro/after_dynamo.py")


def own_backend_frame(p: ParsedFailure) -> Frame | None:
    """The frame of the script's own backend where the failure was raised: the final traceback goes from
    Dynamo's call of the backend, through torch.compile's wrappers only, into code outside torch that
    raises. A failure there is the backend's, not PyTorch's compiler's."""
    for block in reversed(p.blocks):
        frames = block.frames
        calls = [i for i, f in enumerate(frames) if f.in_torch and f.function in BACKEND_CALLS]
        if not calls:
            continue
        after = frames[calls[-1] + 1:]
        if block.exc is None or not after or not _script_code(after[-1]):
            return None  # cut before the exception, or raised in torch or in a library
        wrappers_only = all(_script_code(f) or f.file.replace("\\", "/").endswith(_BACKEND_WRAPPERS) for f in after)
        return next(f for f in after if not f.in_torch) if wrappers_only else None
    return None


def _script_code(frame: Frame) -> bool:
    return is_user_path(frame.file.replace("\\", "/"))


def triton_outside_torch(p: ParsedFailure) -> bool:
    """Triton's frames and not one of torch's: a Triton kernel the script launched itself, not one Inductor
    generated."""
    frames = p.all_frames()
    return bool(frames) and not any(f.in_torch for f in frames) \
        and any("/triton/" in f.file.replace("\\", "/") for f in frames)


# --------------------------------------------------------------------------------------------
# Where the final exception was raised

RaisedIn = Literal["program", "torch", "compiled_code"]
# torch's public layer, which hands the program's arguments on to an op, checks them or compares them
# (torch.testing): an error raised there is about what the program passed, so the frame that called it decides
_TORCH_API_LAYER = ("torch/nn/modules/", "torch/nn/functional.py", "torch/functional.py", "torch/_tensor.py",
                    "torch/__init__.py", "torch/overrides.py", "torch/_jit_internal.py", "torch/testing/")


def _final_frames(p: ParsedFailure) -> list[Frame]:
    block = next((b for b in reversed(p.blocks) if b.exc is not None), None)
    return block.frames if block is not None else []


def _generated(frame: Frame) -> bool:
    path = frame.file.replace("\\", "/")
    return frame.in_generated_code() or path.startswith("<eval_with_key>") or (
        path.endswith("torch/fx/graph_module.py") and frame.function in ("call_wrapped", "__call__"))


# comparison helpers outside torch a program's own check raises through: the frame that called them decides
_CHECK_HELPERS = re.compile(r"(?:^|/)(?:unittest|numpy/testing|_pytest)/")


def raised_in(p: ParsedFailure) -> tuple[RaisedIn, Frame] | None:
    """Whose code raised the final exception, and the frame that decides: code torch generated or compiled
    (an FX graph's forward, Inductor's output code), torch's own code (past its public layer), or the program
    (the script, its libraries, or a call into torch's public layer or a comparison helper with what the
    script passed)."""
    frames = _final_frames(p)
    for frame in reversed(frames):
        if _generated(frame):
            return "compiled_code", frame
        path = frame.file.replace("\\", "/")
        if frame.in_torch and not any(part in path for part in _TORCH_API_LAYER):
            return "torch", frame
        if not frame.in_torch and not _CHECK_HELPERS.search(path):
            return "program", frame
    return ("torch", frames[-1]) if frames else None


# torch frames that run what a backend compiled: Dynamo's wrapper of the compiled function, AOTAutograd's runtime
# wrappers, an FX graph's forward
_RUNS_COMPILED = (("torch/_dynamo/eval_frame.py", ("_fn",)),
                  ("torch/_functorch/_aot_autograd/runtime_wrappers.py", ()))


def compiled_callable_frame(p: ParsedFailure) -> Frame | None:
    """The script's function that raised the final exception when torch.compile's runtime called it, not the
    script: a callable the script's backend returned (or a function Dynamo left out of the graph, which runs
    the same without compilation). The frame torch called, outermost of the script's frames at the end."""
    frames = _final_frames(p)
    i = len(frames)
    while i > 0 and _script_code(frames[i - 1]):
        i -= 1
    if i == len(frames) or i == 0:
        return None
    return frames[i] if _runs_compiled(frames[i - 1]) else None


def _runs_compiled(frame: Frame) -> bool:
    path = frame.file.replace("\\", "/")
    return _generated(frame) or any(where in path and (not funcs or frame.function in funcs)
                                    for where, funcs in _RUNS_COMPILED)


# --------------------------------------------------------------------------------------------
# The item of a compared sequence that differs, as the program's source writes it

# torch.testing.assert_close on a tuple, list or dict of results names the item that differs
_ITEM_RE = re.compile(r"The failure occurred for item \[(\d+)\]")
_COMPARES = re.compile(r"assert|close|equal|check|compare|same", re.IGNORECASE)


def mismatched_item(text: str) -> int | None:
    """The index of the compared item that differs, when the assertion names one."""
    found = _ITEM_RE.findall(text)
    return int(found[-1]) if found else None


def compared_item(parsed: ParsedFailure, text: str) -> str | None:
    """`item [1] is `x.grad` (repro.py:12)`: the item the assertion names, read at the program's frames that
    made the comparison, innermost first, from the sequence literal the comparing call was given (or that the
    name it was given was last assigned before it)."""
    item = mismatched_item(text)
    if item is None:
        return None
    frames = [f for block in parsed.blocks for f in block.frames if is_user_path(f.file)]
    for frame in reversed(frames):
        found = _element_at(frame, item)
        if found is not None:
            return f"item [{item}] is `{found}` ({Path(frame.file).name}:{frame.line})"
    return None


def _element_at(frame: Frame, item: int) -> str | None:
    try:
        tree = ast.parse(Path(frame.file).read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _COMPARES.search(ast.unparse(n.func))
             and n.lineno <= frame.line <= (n.end_lineno or n.lineno)]
    for call in calls:  # the first sequence it was given is the actual one (`check(name, got, want)` too)
        for arg in [*call.args, *(k.value for k in call.keywords if k.arg == "actual")]:
            given = _last_literal(tree, arg.id, call.lineno) if isinstance(arg, ast.Name) else arg
            if isinstance(given, (ast.Tuple, ast.List)):
                if item < len(given.elts) and not any(isinstance(e, ast.Starred) for e in given.elts):
                    return ast.unparse(given.elts[item])
                break
    return None


def innermost_function(tree: ast.AST, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function (def line to last line) that holds the line."""
    holding = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno, default=None)


def _last_literal(tree: ast.Module, name: str, before: int) -> ast.expr | None:
    """The tuple or list literal last assigned to `name` before the line, in the function that holds the line."""
    scope: ast.AST = innermost_function(tree, before) or tree
    found: ast.Assign | None = None
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and node.lineno < before and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name \
                and (found is None or node.lineno > found.lineno):
            found = node
    return found.value if found is not None and isinstance(found.value, (ast.Tuple, ast.List)) else None
