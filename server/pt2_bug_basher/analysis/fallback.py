"""A best guess for error text the rules cannot place (no exception line, no rule's phrase).

Pasted excerpts are often a traceback cut before its exception line, a log without an error, or
printed values. What such text still shows is *where* the program was (which part of torch the
frames and the log lines come from) and *what it talks about* (the words of one failure kind).
This module scores that weak evidence per category:

- frames: every traceback frame (plain, IPython or log-prefixed) is sorted into a part of the
  stack by the caller's ``frame_kind`` (Dynamo's tracer, Inductor's compiler, the compiled code,
  Triton, torch.export, the symbolic-shapes engine, the comparison of results, Dynamo's recompile
  bookkeeping); the innermost informative frame counts most, every other part seen a little;
- log sources: the file (glog, TORCH_LOGS) or logger (Python logging) that emitted a line says
  which subsystem was talking (``symbolic_shapes.py:3787]``, ``torch._inductor.select_algorithm``);
- words: a small vocabulary per category (``core dumped``, ``last reason``, ``XBLOCK``,
  ``unbacked``, ``ExportedProgram``...), each pattern counted once, read only in messages and log
  text: not in file paths, frame lines or the source lines a traceback shows; a few whole-line
  shapes are read before paths are blanked (the recompile-limit warning's ``function: 'f' (f.py:3)``);
- printed results: an eager and a compiled result printed under their names that differ (the same
  print on both sides, as with compilation off, is no evidence; frames, source lines and names
  inside code such as ``backend='eager'`` are not printed results).

It answers only when the best category clearly wins (``MIN_SCORE``, ``MIN_RATIO``: chosen on cuts
of the development and tuning corpora that the rules call unknown, for no wrong answer there), and
its confidence stays under ``MAX_CONFIDENCE``, below what any rule gives: a guess, and the evidence
lines' rule names (``fallback:...``) say what decided.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .failure import Frame, _frame_from_match, match_frame, strip_prefix

WINDOW = 64 * 1024  # bytes read back from the end of the text
MIN_SCORE = 1.5  # the winner needs at least this much evidence
MIN_RATIO = 1.5  # ... and this many times the runner-up's
MAX_CONFIDENCE = 0.25  # under any rule's: one lone rule of weight 1.0 gives 0.28

# part of the stack (as the caller's frame_kind names it) -> category
_KIND_CATEGORY = {
    "trace": ("graph_break", "dynamo_internal"),  # a cut in Dynamo's tracer: either, the words decide
    "dynamo_internal": ("dynamo_internal",),
    "compile": ("backend_compiler_failed",),
    "triton": ("triton",),
    "generated": ("runtime_crash",),
    "runtime": ("runtime_crash",),
    "export": ("export",),
    "shapes": ("dynamic_shapes",),
    "compare": ("accuracy",),  # comparing results: torch.testing, a line calling assert_close / allclose
    "recompile": ("recompile",),  # Dynamo's recompile bookkeeping (fail_on_recompile, the recompile limit)
}
INNERMOST_WEIGHT = 2.0
OTHER_PART_WEIGHT = 0.5

# the file that emitted a log line -> (category, weight)
_LOG_SOURCES: tuple[tuple[re.Pattern[str], str, float], ...] = (
    (re.compile(r"fx/experimental/(?:symbolic_shapes|recording)\.py$"), "dynamic_shapes", 1.5),
    (re.compile(r"_dynamo/guards\.py$"), "recompile", 1.0),
    (re.compile(r"_inductor/runtime/triton_heuristics\.py$|_higher_order_ops/triton_kernel_wrap\.py$"), "triton", 1.5),
    (re.compile(r"_inductor/(?:select_algorithm|autotune_process)\.py$"), "triton", 1.0),
    (re.compile(r"_inductor/.+\.py$"), "backend_compiler_failed", 1.0),
    (re.compile(r"_functorch/_aot_autograd/.+\.py$"), "backend_compiler_failed", 1.0),
    (re.compile(r"(?:^|/)export/.+\.py$|_export/.+\.py$"), "export", 1.5),
)
# a line of source code shown by a traceback (under a frame, or IPython's / rich's numbered context
# lines): it tells where the program was, not what went wrong, so its words do not count
_SOURCE_CONTEXT = re.compile(r"^\s*(?:│\s*)?(?:❱|-+>)?\s*\d+\s(?:\s|│)")
# file paths and quoted file names: the frames and log sources speak for them, their words must not
_PATHS = re.compile(r'"[^"]*"|(?:~|\.{0,2})/\S*|[A-Za-z]:\\\S*|\S+\.py\b\S*|\S+/\S+\.\w+\S*')
_LOG_SOURCE = re.compile(r"^(?:\[rank\d+\]:\s?)?[VIWEDF]\d{4} [\d:.]+ +\d+ (?P<file>[^\s\]]+\.py):\d+\]"
                         r"|^\[[\d-]+ [\d:,.]+\] (?:\[[\d/_]+\] )?(?P<logger>torch\.[\w.]+): \[\w+\]")

# words of one failure kind: (category, weight, pattern); each pattern counts once per text
_WORDS: tuple[tuple[str, float, re.Pattern[str]], ...] = tuple((c, w, re.compile(p)) for c, w, p in (
    ("runtime_crash", 1.5, r"core dumped|\bAborted\b|free\(\): |double free|corrupted (?:size|double|unsorted)"
                           r"|malloc\(\)|Segmentation|SIGSEGV|SIGABRT|exit code (?:139|134|-11|-6)"),
    ("runtime_crash", 1.0, r"\bbacktrace\b|\[New Thread|received signal|Thread \d+ .* received"),
    ("recompile", 1.5, r"last reason:|\b[Rr]ecompil(?:e|es|ing|ation)\b|guard fail(?:ure|ed)"),
    ("recompile", 1.0, r"size mismatch at index|___check_(?:obj|type)_id|\[__guards\]"),
    ("graph_break", 1.5, r"(?i)graph[ -]break|\bUnsupported\b|break_graph_if_unsupported"),
    ("dynamo_internal", 1.5, r"InternalTorchDynamo|[Ii]nternal (?:error|assert)"),
    ("triton", 1.5, r"\btriton\b|\bTriton\b|\btl\.\w+|\bXBLOCK\b|\bRBLOCK\b|\bcubin\b|\bptx\b"),
    ("triton", 1.0, r"[Aa]utotun(?:e|ing)|num_warps|num_stages|launcher"),
    ("dynamic_shapes", 1.5, r"\bSym(?:Int|Float|Bool)\b|unbacked|data-dependent|symbolic (?:size|shape|stride)"),
    ("dynamic_shapes", 1.0, r"dynamic=True|mark_dynamic|\bDim\b|Dim\.(?:DYNAMIC|AUTO)|specializ\w+|\bEq\([su]\d"),
    ("export", 1.5, r"torch\.export|ExportedProgram|dynamo_export|draft_export|\bexport\(|exportdb"),
    ("export", 0.5, r"strict=(?:True|False)|\bonnx\b"),
    ("backend_compiler_failed", 1.5, r"Inductor|compile_fx|CppCompile|\bg\+\+|\bclang\+\+"),
    ("backend_compiler_failed", 1.0, r"\binductor\b|\blowering\b|codegen|scheduler|aot_autograd|cpp_wrapper"),
    ("accuracy", 1.5, r"(?i)\baccuracy\b|\bnan\b|\bMSE\b|\bmismatch|\bdiverg|allclose|fp64|fp32 ref"),
    ("accuracy", 1.0, r"(?i)\b(?:loss|difference|diff|error)\b.{0,40}(?:tensor\(|\d\.\d)"),
))

# the shape of a whole line (read before file paths are blanked out): (category, weight, pattern)
_LINE_SHAPES: tuple[tuple[str, float, re.Pattern[str]], ...] = (
    # the recompile-limit warning names the function it gave up on: `function: 'forward' (model.py:131)`
    ("recompile", 1.5, re.compile(r"\bfunction: '[^']+' \([^()\n]*:\d+\)")),
)

# a script printing its eager and its compiled results (`eager: ...`, `=== compiled x.grad ===` above a
# tensor): the side a printed block belongs to
_SIDE = re.compile(r"(?i)\b(?P<side>eager|compiled?|inductor|optimized)\b")
MAX_BLOCK_LINES = 40


def _in_code(line: str, m: re.Match[str]) -> bool:
    """The side's name is part of code, not a label: an attribute or call (`torch.compile(`) or a
    quoted argument (`backend='eager'`)."""
    before = line[m.start() - 1] if m.start() else ""
    after = line[m.end()] if m.end() < len(line) else ""
    return before in (".", "'", '"', "=") or after in ("(", "'", '"')
PRINTED_DIFFER_WEIGHT = 2.0


@dataclass
class Guess:
    category: str
    confidence: float
    scores: dict[str, float]
    evidence: list[tuple[int, str, str]] = field(default_factory=list)  # (0-based line, line, rule)


@dataclass
class _Tally:
    scores: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)

    def add(self, category: str, weight: float, line_no: int, line: str, rule: str) -> None:
        self.scores[category] = self.scores.get(category, 0.0) + weight
        self.evidence.setdefault(category, []).append((line_no, line, rule))


def guess(text: str, frame_kind: Callable[[Frame], str]) -> Guess | None:
    """The category the text's frames, log sources and words point to, or None when none clearly wins."""
    start = max(0, len(text) - WINDOW)
    if start:
        start = text.find("\n", start) + 1 or start
    first_line_no = text.count("\n", 0, start)
    tally = _Tally()
    innermost: tuple[int, str, str] | None = None  # (line_no, line, kind) of the last informative frame
    parts_seen: dict[str, tuple[int, str]] = {}
    sources_seen: set[str] = set()
    words_seen: set[int] = set()
    lines = text[start:].split("\n")
    code_line = -1  # the line under the last frame: its source code
    where_lines: set[int] = set()  # frames and the source lines they show
    for offset, line in enumerate(lines):
        line_no = first_line_no + offset
        bare = strip_prefix(line)
        m = match_frame(bare)
        if m is not None:
            code_line = offset + 1
            frame = _frame_from_match(m)
            below = strip_prefix(lines[offset + 1]) if offset + 1 < len(lines) else ""
            if below and match_frame(below) is None:
                frame.code = below.strip()  # the frame's source line
            kind = frame_kind(frame)
            if kind in _KIND_CATEGORY:
                innermost = (line_no, line, kind)
                parts_seen.setdefault(kind, (line_no, line))
        src = _LOG_SOURCE.match(line)
        if src is not None:  # a glog path, or a logger name read as one (torch._inductor.graph)
            path = (src.group("file") or src.group("logger").replace(".", "/") + ".py").replace("\\", "/")
            for pattern, category, weight in _LOG_SOURCES:
                if path not in sources_seen and pattern.search(path):
                    sources_seen.add(path)
                    tally.add(category, weight, line_no, line, "fallback:log_source")
                    break
        if m is not None or offset == code_line or _SOURCE_CONTEXT.match(bare):
            where_lines.add(offset)
            continue  # frames and source lines say where, not what
        for i, (category, weight, pattern) in enumerate(_LINE_SHAPES, start=len(_WORDS)):
            if i not in words_seen and pattern.search(bare):
                words_seen.add(i)
                tally.add(category, weight, line_no, line, "fallback:line_shape")
        words = _PATHS.sub(" ", bare)
        for i, (category, weight, pattern) in enumerate(_WORDS):
            if i not in words_seen and pattern.search(words):
                words_seen.add(i)
                tally.add(category, weight, line_no, line, "fallback:words")
    differ = _printed_sides_differ(lines, where_lines)
    if differ is not None:
        tally.add("accuracy", PRINTED_DIFFER_WEIGHT, first_line_no + differ, lines[differ],
                  "fallback:printed_sides_differ")
    if innermost is not None:
        line_no, line, kind = innermost
        for category in _KIND_CATEGORY[kind]:
            tally.add(category, INNERMOST_WEIGHT, line_no, line, f"fallback:innermost_frame:{kind}")
    for kind, (line_no, line) in parts_seen.items():
        if innermost is None or kind != innermost[2]:
            for category in _KIND_CATEGORY[kind]:
                tally.add(category, OTHER_PART_WEIGHT, line_no, line, f"fallback:frames:{kind}")
    if not tally.scores:
        return None
    ranked = sorted(tally.scores.items(), key=lambda kv: -kv[1])
    best, top = ranked[0]
    runner = ranked[1][1] if len(ranked) > 1 else 0.0
    if top < MIN_SCORE or top < MIN_RATIO * runner:
        return None
    confidence = round(MAX_CONFIDENCE * (1.0 - runner / top) * min(1.0, top / (2 * MIN_SCORE)), 3)
    evidence = sorted(tally.evidence[best], key=lambda e: -e[0])
    return Guess(best, max(0.05, confidence), dict(ranked), evidence)


def _printed_sides_differ(lines: list[str], where_lines: set[int]) -> int | None:
    """The line (index) that starts the compiled side's printed result when the text prints an eager
    and a compiled result that differ; None when it prints no such pair or the two agree (with
    compilation off both sides print the same). Frames and the source lines under them are code,
    not printed output, and so are labels inside code (`torch.compile(`, `backend='eager'`)."""
    blocks: dict[str, list[str]] = {}
    starts: dict[str, int] = {}
    current: str | None = None
    for i, line in enumerate(lines):
        if i in where_lines:
            current = None
            continue
        labels = [m for m in _SIDE.finditer(line) if not _in_code(line, m)]
        if labels:
            for m, nxt in zip(labels, [*labels[1:], None], strict=True):
                side = "eager" if m.group("side").lower() == "eager" else "compiled"
                current = side
                starts.setdefault(side, i)
                rest = line[m.end():nxt.start() if nxt else len(line)]
                blocks.setdefault(side, []).append(rest.strip(" :=-#|[]()"))
        elif current is not None and line.strip() and len(blocks[current]) < MAX_BLOCK_LINES:
            blocks[current].append(line.strip())
        elif not line.strip():
            current = None
    eager, compiled = " ".join(blocks.get("eager", [])).split(), " ".join(blocks.get("compiled", [])).split()
    if not eager or not compiled or eager == compiled:
        return None
    return starts["compiled"]
