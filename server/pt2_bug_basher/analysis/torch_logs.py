"""TORCH_LOGS: presets per failure category, spec validation, and parsing log text into structure.

Pure text processing: nothing here imports torch.  The formats parsed are the ones torch 2.13
prints (see tests/data/logs/ for real captures):

* graph breaks (artifact ``graph_breaks``)::

      V1202 18:43:12.112000 4730 torch/_dynamo/symbolic_convert.py:5124] [0/0] [__graph_breaks] \
          Graph break in user code at /x/f.py:24
      ...[__graph_breaks] Graph Break Reason: Encountered graph break when attempting to trace CALL: ...
      ...[__graph_breaks]
      ...[__graph_breaks] Failed to trace builtin operator
      ...[__graph_breaks]   Explanation: ...
      ...[__graph_breaks]   Hint: ...

  and, when the same break is hit again, ``Graph break (user stack suppressed due to duplicate
  graph break) in user code at FILE:LINE``;
* the error raised under ``fullgraph=True`` / strict export (``torch._dynamo.exc.Unsupported:
  <type>`` ... ``from user code:`` ``File "...", line N``);
* recompiles (``recompiles`` / ``recompiles_verbose``): ``Recompiling function g in FILE:LINE`` then
  ``- 0/2: <guard failure>`` lines, newest cache entry first; ``guards`` dumps supply the
  ``TENSOR_MATCH`` guard behind a tensor mismatch;
* graphs and frames: ``===== __compiled_fn_N_... =====`` (``graph_code``, ``+dynamo``),
  ``Step 2: calling compiler function`` (``dynamo``), ``torchdynamo start compiling`` (``+dynamo``)
  and ``Step 1: torchdynamo start tracing`` (``dynamo``); with none of those, the compiled entries
  the ``guards`` (``TREE_GUARD_MANAGER:`` under a compile id) and ``recompiles`` logs show
  (analysis/guards.py summarises those trees).

Lines may carry torch's default prefix (``V1202 hh:mm:ss.us PID file.py:N] [0/1] [__artifact]``,
optionally ``[rank0]:`` before it) or none (a custom TORCH_LOGS_FORMAT); other output interleaved
between log records (print output, warnings, tracebacks) is skipped.
"""

from __future__ import annotations

import difflib
import re
import textwrap
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.failure import FRAME_LINE
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.playbooks import LAYER_PRESETS, PLAYBOOKS

if TYPE_CHECKING:
    from pt2_bug_basher.analysis.output_code import OutputCode

# --------------------------------------------------------------------------------------------
# Presets and validation
# --------------------------------------------------------------------------------------------

# One preset per failure category, from the category table (playbooks.py), plus "graphs".
PRESETS: dict[str, str] = {
    **{category: playbook.logs for category, playbook in PLAYBOOKS.items() if playbook.logs},
    **LAYER_PRESETS,
    "graphs": "graph_code",  # every FX graph Dynamo captured
}

# What a category's preset sets besides TORCH_LOGS: environment variables, and Inductor config
# values applied by a launcher before the script runs (a caller's own env wins over these).
PRESET_ENV: dict[str, dict[str, str]] = {
    category: dict(playbook.env) for category, playbook in PLAYBOOKS.items() if playbook.env
}
PRESET_INDUCTOR_CONFIG: dict[str, dict[str, object]] = {
    category: dict(playbook.inductor_config) for category, playbook in PLAYBOOKS.items() if playbook.inductor_config
}

MAX_SPEC_CHARS = 2000
# The resource that lists a case's TORCH_LOGS names (check_env gives counts and this address).
NAMES_URI = "case://{case_id}/torch-logs"
MAX_SPEC_ENTRIES = 64

# Used only when the environment report could not list the names (the probe failed): torch 2.13.
_FALLBACK_COMPONENTS = (
    "aot", "async_compile", "autograd", "c10d", "cache", "ddp", "distributed", "dtensor", "dynamic",
    "dynamo", "export", "fake_tensor", "fsdp", "inductor", "native_dsl", "onnx", "pp", "torch",
)
_FALLBACK_ARTIFACTS = (
    "annotation", "aot_graphs", "aot_graphs_effects", "aot_joint_graph", "auto_chunker", "autotuning",
    "benchmarking", "bytecode", "caching", "compiled_autograd", "compiled_autograd_verbose",
    "compute_dependencies", "cudagraph_static_inputs", "cudagraphs", "ddp_graphs", "fusion", "graph",
    "graph_breaks", "graph_code", "graph_code_verbose", "graph_region_expansion", "graph_sizes", "guards",
    "hierarchical_compile", "incremental", "inductor_metrics", "ir_post_fusion", "ir_pre_fusion",
    "kernel_code", "loop_ordering", "loop_tiling", "node_runtime_estimation", "not_implemented",
    "onnx_diagnostics", "output_code", "overlap", "overlap_scheduling", "perf_hints", "post_grad_graphs",
    "pre_grad_graphs", "recompiles", "recompiles_verbose", "schedule", "side_effects", "sym_node",
    "trace_bytecode", "trace_call", "trace_shape_events", "trace_source", "verbose_guards",
)

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODULE_RE = re.compile(r"torch(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def log_names(components: list[str], artifacts: list[str]) -> dict[str, object]:
    """The names a spec may use, as the torch-logs resource lists them."""
    own = bool(components or artifacts)
    return {
        "source": "registered by the case's torch" if own else
                  "torch 2.13's names (the case's torch did not list its own)",
        "components": sorted(components or _FALLBACK_COMPONENTS),
        "artifacts": sorted(artifacts or _FALLBACK_ARTIFACTS),
        "presets": dict(sorted(PRESETS.items())),
        "spec": "comma-separated components, artifacts, 'all' or modules under torch (torch._dynamo); + before a "
                "name logs at DEBUG, - at ERROR only. Pass a preset or a spec as run_with_logs(logs=...).",
    }


def resolve_logs(spec_or_preset: str, components: list[str], artifacts: list[str],
                 names_at: str = NAMES_URI) -> str:
    """A preset name -> its TORCH_LOGS spec; otherwise the spec itself, validated and normalised.

    A spec is a comma-separated list of entries, each optionally prefixed by ``+`` (DEBUG) or ``-``
    (ERROR): a log component (``dynamo``, ``inductor``, ...), an artifact (``graph_breaks``,
    ``output_code``, ...), ``all``, or a module name under torch (``torch._dynamo``,
    ``+torch._inductor.codecache``).  ``components``/``artifacts`` are the names the case's torch
    registers (from the environment report); when both are empty, torch 2.13's names are used.
    Raises InvalidInput naming every unknown entry with its close matches, and the presets;
    ``names_at`` is the resource that lists every name.
    """
    if not isinstance(spec_or_preset, str):
        raise InvalidInput("logs must be a string (a preset or a TORCH_LOGS spec), "
                           f"not {type(spec_or_preset).__name__}.")
    raw = spec_or_preset.strip()
    if raw in PRESETS:
        return PRESETS[raw]
    if not raw:
        raise InvalidInput(f"logs is empty: give a preset ({_preset_list()}) or a TORCH_LOGS spec "
                           "such as '+dynamo,graph_breaks'.")
    if len(raw) > MAX_SPEC_CHARS:
        raise InvalidInput(f"logs spec is {len(raw)} characters; at most {MAX_SPEC_CHARS} are accepted.")
    if any(ord(c) < 32 or ord(c) == 127 for c in raw):
        raise InvalidInput("logs spec contains a control character (NUL, newline, tab, ...); "
                           "use a comma-separated list of names.")
    if raw in ("help", "+help"):
        raise InvalidInput(f"TORCH_LOGS={raw} only prints torch's help and exits; pick a preset ({_preset_list()}) "
                           f"or names from the resource {names_at}.")
    entries = raw.split(",")
    if len(entries) > MAX_SPEC_ENTRIES:
        raise InvalidInput(f"logs spec has {len(entries)} entries; at most {MAX_SPEC_ENTRIES} are accepted.")

    comps = set(components) or set(_FALLBACK_COMPONENTS)
    arts = set(artifacts) or set(_FALLBACK_ARTIFACTS)
    known = comps | arts | {"all"}
    problems: list[str] = []
    out: list[str] = []
    for position, entry in enumerate(entries, 1):
        item = entry.strip()
        if not item:
            problems.append(f"entry {position} is empty (stray comma?)")
            continue
        sign = item[0] if item[0] in "+-" else ""
        name = item[len(sign):]
        if not name:
            problems.append(f"entry {position} ({item!r}) has no name after {sign!r}")
            continue
        if any(c.isspace() for c in name) or name[0] in "+-":
            problems.append(f"{item!r} is not a name (spaces and doubled +/- are not allowed)")
            continue
        if name in known or _MODULE_RE.fullmatch(name):
            normalised = sign + name
            if normalised not in out:
                out.append(normalised)
            continue
        if not _NAME_RE.fullmatch(name) and "." not in name:
            problems.append(f"{item!r} is not a valid name")
            continue
        candidates = sorted(known | set(PRESETS)) if name not in PRESETS else sorted(known)
        close = difflib.get_close_matches(name, candidates, n=4, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        if name in PRESETS:
            problems.append(f"{name!r} is a preset, and presets can only be used alone, not inside a list "
                            f"(it stands for {PRESETS[name]!r}){hint}")
            continue
        if "." in name:
            hint += " (module names must start with 'torch.', e.g. torch._dynamo)"
        problems.append(f"unknown name {name!r}{hint}")
    if problems:
        raise InvalidInput(
            "Invalid TORCH_LOGS spec " + repr(raw) + ": " + "; ".join(problems) + ". "
            f"Presets: {_preset_list()}. Otherwise use log components ({', '.join(sorted(comps))}), "
            f"artifacts (all of them: the resource {names_at}), 'all', or a module such as "
            "torch._dynamo, each optionally prefixed by + (debug) or - (errors only)."
        )
    return ",".join(out)


def _preset_list() -> str:
    return ", ".join(sorted(PRESETS))


# --------------------------------------------------------------------------------------------
# Parsed structure
# --------------------------------------------------------------------------------------------


class GraphBreak(BaseModel):
    reason: str = Field(description="the graph break type, e.g. 'Data-dependent branching'")
    location: str | None = Field(None, description="user source 'file.py:LINE' where the break happened")
    file: str | None = Field(None, description="full path of that file as the log shows it")
    line: int | None = None
    count: int = Field(1, description="times it was reported in the log")
    explanation: str | None = Field(None, description="first line of Dynamo's explanation")
    hints: list[str] = Field(default_factory=list, description="Dynamo's hints (first line of each)")
    gb_id: str | None = Field(None, description="graph break registry id, e.g. gb0170")
    fatal: bool = Field(False, description="raised as an error (fullgraph=True / export) rather than logged")


class Recompile(BaseModel):
    function: str | None = Field(None, description="the function recompiled")
    location: str | None = Field(None, description="'file.py:LINE' of the function's definition")
    file: str | None = None
    reason: str = Field(description="why the newest compiled entry was rejected, e.g. "
                                    "\"tensor 'x' dtype mismatch. expected Float, actual Double\" or 'scale == 2'")
    guard: str | None = Field(None, description="the guard that failed: the expression itself, or the "
                                                "TENSOR_MATCH guard of a mismatched tensor when the log has "
                                                "a guards dump")
    guard_location: str | None = Field(None, description="'file.py:LINE' of the user code the guard came from")
    count: int = 1


class LogSummary(BaseModel):
    graph_breaks: list[GraphBreak] = Field(default_factory=list,
                                           description="deduplicated by (reason, location), first-seen order")
    recompiles: list[Recompile] = Field(default_factory=list,
                                        description="deduplicated by (function, location, reason)")
    graphs_compiled: int | None = Field(None, description="FX graphs Dynamo produced; None when the log does "
                                                          "not show them. With only the guards/recompiles logs "
                                                          "on: one per compiled entry (an upper bound)")
    frames_compiled: int | None = Field(None, description="frame compilations (first compiles and recompiles); "
                                                          "None when the log does not show them")
    unique_graph_break_count: int = 0
    total_graph_break_count: int = 0
    recompile_limit_hit: bool = False
    compile_ids: list[str] = Field(default_factory=list,
                                   description="Dynamo compile ids seen ('frame/recompile'), first-seen order")
    output_code_paths: list[str] = Field(default_factory=list, description="files Inductor wrote its output code to")


# --------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------

_PREFIX_RE = re.compile(
    r"(?:\[rank\d+\]:)?[VDIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ (?P<src>[^\s\]]+:\d+)\] "
    r"(?:\[(?P<cid>[!\d][\w/!]*)\] )?(?:\[__(?P<art>\w+)\] ?)?"
)
_GB_HEADER_RE = re.compile(
    r"Graph break (?:\(user stack suppressed due to duplicate graph break\) )?"
    r"in user code at (?P<file>.+):(?P<line>\d+)\s*$"
)
_UNSUPPORTED_RE = re.compile(r"torch\._dynamo\.exc\.Unsupported: (?P<type>.+?)\s*$")
_RECOMPILE_RE = re.compile(r"Recompiling function (?P<fn>\S+) in (?P<file>.+):(?P<line>\d+)\s*$")
_FAILURE_RE = re.compile(r"\s*- (?P<cid>[!\d][\w/!]*): (?P<text>.*?)\s*$")
_GUARD_COMMENT_RE = re.compile(r"#\s*(?P<file>[^\s#]+):(?P<line>\d+) in \S+\s*$")
_TENSOR_FAILURE_RE = re.compile(r"tensor '(?P<name>.+?)' \w")
_GB_ID_RE = re.compile(r"/gb/(gb\d+)\.html")
_COMPILED_FN_RE = re.compile(r"===== (__compiled_fn_\w+) =====")
_OUTPUT_CODE_RE = re.compile(r"Output code written to: (\S+)")
_LIMIT_RE = re.compile(r"torch\._dynamo hit config\.\w*(?:recompile|cache_size)_limit")
_RESTART_SUFFIX_RE = re.compile(r"_\d+$")

_UNPREFIXED_BLOCK_MAX_LINES = 400


def split_log_line(raw: str) -> tuple[str | None, str]:
    """A log line's compile id ('0/1', None when not shown) and its message without torch's prefix."""
    if raw[:1] in "VDIWEC[":
        m = _PREFIX_RE.match(raw)
        if m:
            return m.group("cid"), raw[m.end():]
    return None, raw


def basename(path: str) -> str:
    return re.split(r"[/\\]", path)[-1]


def _normal_cid(cid: str) -> str:
    """'0/0_1' (attempt 1 after a restart) -> '0/0'."""
    return _RESTART_SUFFIX_RE.sub("", cid)


class _GraphBreakBlock:
    kind = "gb"

    def __init__(self, key: tuple[str, str | None] | None, file: str, line: int, fatal: bool,
                 reason: str | None = None, suppressed: bool = False):
        self.key = key
        self.suppressed = suppressed  # the short form Dynamo logs for a repeated break: no traceback follows
        self.file = file
        self.line = line
        self.fatal = fatal
        self.reason = reason
        self.need_type = False
        self.reason_seen = reason is not None
        self.explanation: str | None = None
        self.hints: list[str] = []
        self.gb_id: str | None = None
        self.after_link = False
        self.in_traceback = False
        self.traceback_lines = 0
        self.in_user_code = False
        self.user_frames = 0
        self.user_file: str | None = None
        self.user_line: int | None = None
        self.lines = 0
        self.done = False  # for unprefixed blocks: the block has ended

    def feed(self, body: str) -> None:
        self.lines += 1
        stripped = body.strip()
        if not self.reason_seen:
            if body.startswith("Graph Break Reason: "):
                self.reason_seen = True
                text = body[len("Graph Break Reason: "):].strip()
                if text.startswith("Encountered graph break when attempting to trace"):
                    self.need_type = True
                else:
                    self.reason = text
            return
        if self.need_type:
            if stripped:
                self.reason = stripped
                self.need_type = False
            return
        if self.in_user_code:  # the "from user code:" frames of a raised Unsupported
            m = FRAME_LINE.match(body)
            if m:
                self.user_file, self.user_line = m.group("file"), int(m.group("line"))
                self.user_frames += 1
            elif not stripped or not body[:1].isspace():
                self.done = True
            return
        if self.in_traceback:  # "User code traceback:" of a logged break: ends at the blank line after it
            if not stripped and self.traceback_lines:
                self.done = True
            self.traceback_lines += 1
            return
        if stripped.startswith("Explanation: ") and not self.after_link:
            if self.explanation is None:
                self.explanation = stripped[len("Explanation: "):]
        elif stripped.startswith("Hint: ") and not self.after_link:
            self.hints.append(stripped[len("Hint: "):])
        elif "/gb/gb" in stripped and not self.after_link:
            m = _GB_ID_RE.search(stripped)
            if m:
                self.gb_id = m.group(1)
            self.after_link = True  # the formatted reason ends with the documentation link
            if self.suppressed and self.key is None:
                self.done = True
        elif stripped == "User code traceback:":
            self.in_traceback = True
        elif stripped == "from user code:" and self.fatal:
            self.in_user_code = True
        elif self.fatal and stripped and not body[:1].isspace():
            # e.g. "The above exception was the direct cause ...": an Unsupported without user code
            self.done = True
        if self.key is None and self.lines >= _UNPREFIXED_BLOCK_MAX_LINES:
            self.done = True


class _RecompileBlock:
    kind = "recompile"

    def __init__(self, key: tuple[str, str | None] | None, function: str, file: str, line: int):
        self.key = key
        self.function = function
        self.file = file
        self.line = line
        self.failures: list[tuple[str, str]] = []  # (compile id of the rejected entry, text)
        self.lines = 0
        self.done = False

    def feed(self, body: str) -> None:
        self.lines += 1
        if body.strip() and not body[:1].isspace() and self.key is None:
            self.done = True  # unprefixed: every line of the message is indented
            return
        m = _FAILURE_RE.match(body)
        if m:
            self.failures.append((m.group("cid"), m.group("text")))
        if self.key is None and self.lines >= _UNPREFIXED_BLOCK_MAX_LINES:
            self.done = True


class _Collector:
    def __init__(self) -> None:
        self.breaks: dict[tuple[str, str | None], GraphBreak] = {}
        self.logged_counts: dict[tuple[str, str | None], int] = {}
        self.fatal_counts: dict[tuple[str, str | None], int] = {}
        self.recompiles: dict[tuple[str | None, str | None, str], Recompile] = {}
        # compile id -> guarded source -> (TENSOR_MATCH guard text, 'file.py:LINE' it came from)
        self.tensor_guards: dict[str | None, dict[str, tuple[str, str | None]]] = {}
        self.compile_ids: dict[str, None] = {}
        self.frames: dict[str, None] = {}
        self.frames_without_id = 0
        self.compiled_fns: dict[str, None] = {}
        self.step2 = 0
        self.output_paths: dict[str, None] = {}
        self.limit_hit = False
        # compiled entries the guards and recompiles logs show: a GUARDS dump, a recompile and the entry it rejected
        self.guarded_entries: dict[str, None] = {}

    # ---- finishing blocks

    def finish(self, block: _GraphBreakBlock | _RecompileBlock) -> None:
        if isinstance(block, _GraphBreakBlock):
            self._finish_break(block)
        else:
            self._finish_recompile(block)

    def _finish_break(self, b: _GraphBreakBlock) -> None:
        if b.fatal:
            if b.user_file is None:
                return  # an Unsupported that is not about user code (e.g. the recompile limit)
            file, line = b.user_file, b.user_line
        else:
            file, line = b.file, b.line
        reason = b.reason or "(reason not shown in the log)"
        location = f"{basename(file)}:{line}" if file else None
        key = (reason, location)
        record = self.breaks.get(key)
        if record is None:
            record = GraphBreak(reason=reason, location=location, file=file, line=line, count=0,
                                explanation=b.explanation, hints=b.hints, gb_id=b.gb_id, fatal=b.fatal)
            self.breaks[key] = record
        if b.fatal:
            record.fatal = True
            self.fatal_counts[key] = self.fatal_counts.get(key, 0) + 1
        else:
            self.logged_counts[key] = self.logged_counts.get(key, 0) + 1
        # a raised break that the graph_breaks log also reported is one event, not two
        record.count = self.logged_counts.get(key) or self.fatal_counts.get(key, 0)
        if record.explanation is None and b.explanation:
            record.explanation = b.explanation
        if not record.hints and b.hints:
            record.hints = b.hints
        if record.gb_id is None and b.gb_id:
            record.gb_id = b.gb_id

    def _finish_recompile(self, b: _RecompileBlock) -> None:
        if b.failures:
            cid, text = b.failures[0]  # the newest cache entry comes first
        else:
            cid, text = None, "(guard failure not shown in the log)"
        reason, guard_location = text, None
        parts = re.split(r"\s{2,}#\s", text, maxsplit=1)
        if len(parts) == 2:
            reason = parts[0].strip()
            m = _GUARD_COMMENT_RE.search(parts[1])
            if m:
                guard_location = f"{basename(m.group('file'))}:{m.group('line')}"
        guard: str | None = reason
        tm = _TENSOR_FAILURE_RE.match(reason)
        if tm:
            name = tm.group("name")
            guards = self.tensor_guards.get(_normal_cid(cid) if cid else None) or {}
            found = guards.get(f"L['{name}']") or guards.get(name)
            guard, guard_location = found if found else (None, None)
        if b.key is not None and b.key[1]:
            self.guarded_entries[_normal_cid(b.key[1])] = None
        for rejected, _text in b.failures:
            self.guarded_entries[_normal_cid(rejected)] = None
        location = f"{basename(b.file)}:{b.line}"
        key = (b.function, location, reason)
        record = self.recompiles.get(key)
        if record is None:
            self.recompiles[key] = Recompile(function=b.function, location=location, file=b.file, reason=reason,
                                             guard=guard, guard_location=guard_location, count=1)
        else:
            record.count += 1
            if record.guard is None and guard:
                record.guard = guard

    # ---- single lines

    def note_line(self, body: str, cid: str | None) -> None:
        """Facts that sit on one line; cheap substring tests first."""
        if body.startswith("TREE_GUARD_MANAGER:"):
            if cid:
                self.guarded_entries[_normal_cid(cid)] = None
        elif "TENSOR_MATCH: check_tensor(" in body:
            start = body.index("check_tensor(") + len("check_tensor(")
            source = body[start:].split(", ", 1)[0]
            parts = re.split(r"\s{2,}#\s", body[body.index("TENSOR_MATCH:"):], maxsplit=1)
            m = _GUARD_COMMENT_RE.search(parts[1]) if len(parts) == 2 else None
            where = f"{basename(m.group('file'))}:{m.group('line')}" if m else None
            self.tensor_guards.setdefault(_normal_cid(cid) if cid else None, {})[source] = (parts[0].strip(), where)
        elif "torchdynamo start compiling" in body or "torchdynamo start tracing" in body:
            if cid:
                self.frames[_normal_cid(cid)] = None
            elif "torchdynamo start compiling" in body:
                self.frames_without_id += 1
        elif "__compiled_fn_" in body and "=====" in body:
            m = _COMPILED_FN_RE.search(body)
            if m:
                self.compiled_fns[m.group(1)] = None
        elif "Step 2: calling compiler function" in body:
            self.step2 += 1
        elif "Output code written to:" in body:
            m = _OUTPUT_CODE_RE.search(body)
            if m:
                self.output_paths[m.group(1)] = None
        elif (("_limit" in body and _LIMIT_RE.search(body)) or "FailOnRecompileLimitHit" in body
              or "Dynamo recompile limit exceeded" in body):
            self.limit_hit = True

    def summary(self) -> LogSummary:
        breaks = list(self.breaks.values())
        if self.compiled_fns:
            graphs: int | None = len(self.compiled_fns)
        elif self.step2:
            graphs = self.step2
        else:
            graphs = None
        frames = len(self.frames) + self.frames_without_id if (self.frames or self.frames_without_id) else None
        if frames is None and self.guarded_entries:
            # only the guards/recompiles logs are on: each compiled entry is one frame compilation, holding
            # at most one graph (a frame that breaks before its first op compiles none)
            frames = len(self.guarded_entries)
            if graphs is None:
                graphs = frames
        return LogSummary(
            graph_breaks=breaks,
            recompiles=list(self.recompiles.values()),
            graphs_compiled=graphs,
            frames_compiled=frames,
            unique_graph_break_count=len(breaks),
            total_graph_break_count=sum(b.count for b in breaks),
            recompile_limit_hit=self.limit_hit,
            compile_ids=list(self.compile_ids),
            output_code_paths=list(self.output_paths),
        )


def _start_block(body: str, key: tuple[str, str | None] | None) -> _GraphBreakBlock | _RecompileBlock | None:
    if body.startswith("Graph break"):
        m = _GB_HEADER_RE.match(body)
        if m:
            return _GraphBreakBlock(key, m.group("file"), int(m.group("line")), fatal=False,
                                    suppressed=body.startswith("Graph break (user stack suppressed"))
    elif body.startswith("Recompiling function "):
        m = _RECOMPILE_RE.match(body)
        if m:
            return _RecompileBlock(key, m.group("fn"), m.group("file"), int(m.group("line")))
    elif body.startswith("torch._dynamo.exc.Unsupported: "):
        m = _UNSUPPORTED_RE.match(body)
        if m:
            return _GraphBreakBlock(key, "", 0, fatal=True, reason=m.group("type"))
    return None


def parse_logs(text: str) -> LogSummary:
    """Graph breaks, recompiles and compile counts from TORCH_LOGS output (stderr, possibly mixed with stdout)."""
    return _parse_lines(text.splitlines())


def _parse_lines(lines: Iterable[str]) -> LogSummary:
    col = _Collector()
    block: _GraphBreakBlock | _RecompileBlock | None = None
    prefix_match = _PREFIX_RE.match
    for raw in lines:
        key: tuple[str, str | None] | None = None
        cid: str | None = None
        body = raw
        if raw[:1] in "VDIWEC[":
            m = prefix_match(raw)
            if m:
                cid = m.group("cid")
                key = (m.group("src"), cid)
                body = raw[m.end():]
                if cid and cid not in col.compile_ids:
                    col.compile_ids[cid] = None
        new = _start_block(body, key) if body[:1] in "GRt" else None
        if block is not None:
            if new is not None:
                col.finish(block)
                block = None
            elif block.key is not None:
                if key == block.key:
                    block.feed(body)
                    continue
                if key is not None:  # another log record: this one is over
                    col.finish(block)
                    block = None
                else:  # output interleaved with the record (print, warnings): not part of it
                    col.note_line(body, None)
                    continue
            else:
                if key is None:
                    block.feed(body)
                    if block.done:
                        col.finish(block)
                        block = None
                        col.note_line(body, None)
                    continue
                col.finish(block)
                block = None
        if new is not None:
            block = new
            continue
        col.note_line(body, cid)
    if block is not None:
        col.finish(block)
    return col.summary()


# --------------------------------------------------------------------------------------------
# Generated kernels in the output_code log
# --------------------------------------------------------------------------------------------

MAX_KERNEL_CHARS = 2000
MAX_KERNELS_CHARS = 6000


class LoggedKernel(BaseModel):
    name: str = Field(description="cpp_fused_* (C++ on CPU) or triton_* (Triton)")
    kind: str
    compile_id: str | None = Field(None, description="the Dynamo compile whose output code defines it")
    source_nodes: list[str] = Field(default_factory=list, description="FX nodes it computes, from Inductor's "
                                                                      "source-node comment (when it wrote one)")
    aten_ops: list[str] = Field(default_factory=list, description="ATen ops of that comment")
    code: str = Field(description=(
        "its source-node comment and code as generated, indentation and braces kept; #include and import lines, "
        "decorators and blank lines left out; a long kernel is cut, with '... (N more)' saying so"))


def logged_output_code(text: str) -> list[tuple[str | None, str]]:
    """(compile id, module source) of each `Output code:` record of the output_code log."""
    modules: list[tuple[str | None, str]] = []
    key: tuple[str, str | None] | None = None
    lines: list[str] = []
    for raw in text.splitlines():
        if "[__output_code]" not in raw:
            continue
        m = _PREFIX_RE.match(raw)
        if m is None or m.group("art") != "output_code":
            continue
        body = raw[m.end():]
        here = (m.group("src"), m.group("cid"))
        if body.startswith("Output code:"):
            if key is not None:
                modules.append((key[1], "\n".join(lines)))
            key, lines = here, []
        elif key is not None and here == key:
            lines.append(body)
        elif key is not None:
            modules.append((key[1], "\n".join(lines)))
            key, lines = None, []
    if key is not None:
        modules.append((key[1], "\n".join(lines)))
    return modules


# the order kernels are excerpted in: what writes the output that differs, what feeds it, then the rest
_WRITES_OUTPUT, _FEEDS_OUTPUT, _OTHER = 0, 1, 2


def _output_ranks(code: OutputCode, item: int | None) -> dict[str, int]:
    """Kernel name -> rank: the writers of graph output `item` (every output when None or out of range) first,
    then the kernels that write what those read."""
    from pt2_bug_basher.analysis.dataflow import data_flow

    flow = data_flow(code)
    if flow is None or not flow.outputs:
        return {}
    indices = [item] if item is not None and item < len(flow.outputs) else range(len(flow.outputs))
    writers = [w for i in indices if (buffer := flow.outputs[i]) and (w := flow.writer(buffer)) is not None]
    ranks: dict[str, int] = {}
    for writer in writers:
        for read in flow.calls[writer].reads:
            feeder = flow.writer(read, before=writer)
            if feeder is not None and (kernel := flow.calls[feeder].kernel) is not None:
                ranks.setdefault(kernel.name, _FEEDS_OUTPUT)
    for writer in writers:
        if (kernel := flow.calls[writer].kernel) is not None:
            ranks[kernel.name] = _WRITES_OUTPUT
    return ranks


def logged_kernels(text: str, max_chars: int = MAX_KERNELS_CHARS) -> tuple[list[LoggedKernel], list[str]]:
    """The kernels of the output code TORCH_LOGS=output_code printed, within max_chars of code in all: those that
    write the graph output that differs first (the item an assertion names, when one graph was compiled; every
    output otherwise), then those feeding them, then the rest in the order they were generated; and the names of
    those left out for room."""
    from pt2_bug_basher.analysis.failure import mismatched_item
    from pt2_bug_basher.analysis.output_code import parse_output_code

    modules = [(compile_id, parse_output_code(module)) for compile_id, module in logged_output_code(text)]
    item = mismatched_item(text) if len(modules) == 1 else None
    ranked = []
    for compile_id, parsed in modules:
        ranks = _output_ranks(parsed, item)
        ranked += [(ranks.get(k.name, _OTHER), compile_id, k) for k in parsed.kernels]
    ranked.sort(key=lambda entry: entry[0])  # stable: generation order within a rank
    kept: list[LoggedKernel] = []
    left_out: list[str] = []
    seen: set[tuple[str, str]] = set()
    room = max_chars
    for _, compile_id, kernel in ranked:
        if (kernel.name, kernel.body) in seen:
            continue
        seen.add((kernel.name, kernel.body))
        budget = min(MAX_KERNEL_CHARS, room - len(kernel.comment) - 40)
        code = "\n".join(filter(None, [kernel.comment, kernel.excerpt(budget)])) if budget >= 200 else ""
        if not code or len(code) > room:
            left_out.append(kernel.name)
            continue
        room -= len(code)
        kept.append(LoggedKernel(name=kernel.name, kind=kernel.kind, compile_id=f"[{compile_id}]" if compile_id
                                 else None, source_nodes=kernel.source_nodes, aten_ops=kernel.aten_ops, code=code))
    return kept, left_out


# --------------------------------------------------------------------------------------------
# AOTAutograd's view and mutation metadata (the aot_graphs log's fw_metadata)
# --------------------------------------------------------------------------------------------

MAX_AOT_GRAPHS = 4
MAX_GRAPHS = 4
MAX_GRAPH_LINES = 40


class CapturedGraph(BaseModel):
    compile_id: str | None = None
    name: str = Field(description="__compiled_fn_N, as Dynamo named it")
    code: list[str] = Field(description="its forward as TORCH_LOGS=graph_code printed it: every node with its "
                                        "arguments (a value Dynamo folded into a constant shows as one), and the "
                                        "'# File:' lines of the program each came from")
    lines_left_out: int = 0


def captured_graphs(text: str) -> list[CapturedGraph]:
    """The FX graphs Dynamo captured, from TORCH_LOGS=graph_code, first compiled first, each cut at
    MAX_GRAPH_LINES."""
    graphs: list[CapturedGraph] = []
    for raw in text.splitlines():
        prefix = _PREFIX_RE.match(raw)
        if prefix is None or prefix.group("art") != "graph_code":
            continue
        body = raw[prefix.end():]
        named = _COMPILED_FN_RE.search(body)
        if named is not None:
            graphs.append(CapturedGraph(compile_id=prefix.group("cid"), name=_short_fn(named.group(1)), code=[]))
            continue
        if not graphs or not body.strip() or "class GraphModule(" in body:
            continue
        if len(graphs[-1].code) < MAX_GRAPH_LINES:
            graphs[-1].code.append(body)
        else:
            graphs[-1].lines_left_out += 1
    for graph in graphs:
        graph.code = textwrap.dedent("\n".join(graph.code)).splitlines()
    return graphs[:MAX_GRAPHS]


def _short_fn(name: str) -> str:
    """'__compiled_fn_1_809c4376_...' (a uuid in newer torch) -> '__compiled_fn_1'."""
    return re.sub(r"^(__compiled_fn_\d+)_[0-9a-f_]{20,}$", r"\1", name)


_FW_META_RE = re.compile(r"fw_metadata=ViewAndMutationMeta\((?P<body>.*)")
_INPUT_INFO_RE = re.compile(r"InputAliasInfo\((?P<fields>[^()]*)\)")
_OUTPUT_INFO_RE = re.compile(
    r"OutputAliasInfo\(output_type=<OutputType\.(?P<type>\w+): \d+>.*?base_idx=(?P<base>\w+).*?"
    r"requires_grad=(?P<grad>\w+).*?view_meta_sequence=(?P<view>None|ViewMetaSequence\((?P<views>[^()]*)\))\)")


class AotMetadata(BaseModel):
    """What AOTAutograd decided about one graph's inputs and outputs: the work its runtime wrappers do
    outside the compiled graph (mutations copied back to inputs, aliased outputs regenerated as views)."""

    compile_id: str | None = None
    inputs: list[str] = Field(default_factory=list, description="inputs that are mutated or require grad")
    outputs: list[str] = Field(default_factory=list, description="every output: its alias type, base, views")


def aot_metadata(text: str) -> list[AotMetadata]:
    """The fw_metadata AOTAutograd logs (TORCH_LOGS=aot_graphs) per compiled graph, first seen first."""
    out: list[AotMetadata] = []
    seen: set[str | None] = set()
    for raw in text.splitlines():
        found = _FW_META_RE.search(raw)
        if found is None:
            continue
        prefix = _PREFIX_RE.match(raw)
        cid = prefix.group("cid") if prefix else None
        if cid in seen:
            continue
        seen.add(cid)
        body = found.group("body").split(", inner_meta=", 1)[0]
        meta = AotMetadata(compile_id=cid)
        for index, info in enumerate(_INPUT_INFO_RE.finditer(body)):
            fields = dict(pair.split("=", 1) for pair in info.group("fields").split(", ") if "=" in pair)
            what = [name for name, key in (("data mutated", "mutates_data"), ("metadata mutated", "mutates_metadata"))
                    if fields.get(key) == "True"]
            if fields.get("requires_grad") == "True":
                what.append("requires grad" + ("" if fields.get("is_leaf") == "True" else " (not a leaf)"))
            if what:
                meta.inputs.append(f"input {index}: {', '.join(what)}")
        for index, info in enumerate(_OUTPUT_INFO_RE.finditer(body)):
            kind = info.group("type")
            aliased = kind == "alias_of_input" and info.group("base") != "None"
            base = f" of input {info.group('base')}" if aliased else ""
            views = f", regenerated by the views {info.group('views')}" if info.group("views") else ""
            grad = ", requires grad" if info.group("grad") == "True" else ""
            meta.outputs.append(f"output {index}: {kind}{base}{views}{grad}")
        out.append(meta)
        if len(out) >= MAX_AOT_GRAPHS:
            break
    return out

