"""What Dynamo decided, from ``TORCH_LOGS=guards,recompiles``: compiled entries, recompiles, guards per input;
with ``side_effects`` too, the caller's objects it wrote back after the graph ran.

A silently wrong result with ``backend="eager"`` often means a compiled entry was reused for an input
its guards should have rejected. torch 2.13 prints each compiled entry's guards as a tree (artifact
``guards``; see tests/data/logs/guards_recompiles.*.log)::

    [0/0] [__guards] GUARDS:
    [0/0] [__guards] TREE_GUARD_MANAGER:
    [0/0] [__guards] +- RootGuardManager
    [0/0] [__guards] | +- GuardManager: source=L['xs'], accessed_by=..., type=<class 'list'>, ...
    [0/0] [__guards] | | +- TYPE_MATCH: ___check_type_id(L['xs'], ...)  # total = xs[0]  # rep.py:4 in f
    [0/0] [__guards] | | +- LENGTH_CHECK: len(L['xs']) == 2                # total = xs[0]  # rep.py:4 in f
    [0/0] [__guards] | | +- GuardManager: source=L['xs'][0], accessed_by=ListGetItemGuardAccessor(0), ...
    [0/0] [__guards] | | | +- TENSOR_MATCH: check_tensor(L['xs'][0], Tensor, ..., torch.float32, ..., size=[3], ...)

and a recompile as ``[0/1] [__recompiles] Recompiling function f in FILE:LINE`` followed by the failed
guards (``- 0/0: len(xs) == 2``). This module condenses that into one summary per input source and
flags the shapes that let a stale entry be reused: a list or tuple whose items are guarded but whose
length is not, a tensor without TENSOR_MATCH. Pure text processing: nothing here imports torch.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.torch_logs import basename, split_log_line

GUARD_LOGS = "guards,recompiles,side_effects"
MAX_ENTRIES = 8
MAX_INPUTS = 16
MAX_ITEMS_SHOWN = 6

# Guards that pin a sequence's length (or its whole value) on the sequence itself.
LENGTH_GUARDS = frozenset({"LENGTH_CHECK", "SEQUENCE_LENGTH", "LIST_LENGTH", "TUPLE_LENGTH", "DICT_LENGTH",
                           "CONSTANT_MATCH", "EQUALS_MATCH", "ID_MATCH"})
SEQUENCE_TYPES = frozenset({"list", "tuple", "collections.deque", "odict_values", "torch.Size"})
TENSOR_TYPES = frozenset({"torch.Tensor", "torch.nn.parameter.Parameter"})
# Guards whose text is short and says what was assumed: shown next to the guard kinds.
_SHOWN_CHECKS = frozenset({"LENGTH_CHECK", "SEQUENCE_LENGTH", "DICT_LENGTH", "EQUALS_MATCH", "CONSTANT_MATCH"})

_TREE_RE = re.compile(r"^(?P<bars>(?:\| )*)\+- (?P<rest>.*?)\s*$")
_MANAGER_RE = re.compile(r"^(?:\w+: )?\w*GuardManager: source=(?P<source>.*?), accessed_by=(?P<accessor>.*?)"
                         r"(?:, type=<class '(?P<type>[^']*)'>)?(?:, tag_safe=.*)?$")
_GUARD_RE = re.compile(r"^(?P<kind>[A-Z][A-Z0-9_]+)(?::\s?(?P<text>.*))?$")
_COMMENT_SPLIT_RE = re.compile(r"\s{2,}#\s|\s#\s")
_USER_CODE_RE = re.compile(r"#\s*(?P<file>[^\s#]+):(?P<line>\d+) in (?P<fn>[\w<>.]+)")
_TENSOR_RE = re.compile(r"(?P<dtype>torch\.\w+), device=(?P<device>[^,]+), requires_grad=(?P<rg>\w+), "
                        r"size=(?P<size>\[[^\]]*\]), stride=(?P<stride>\[[^\]]*\])")
_RECOMPILE_RE = re.compile(r"Recompiling function (?P<fn>\S+) in (?P<where>.+:\d+)\s*$")
_FAILURE_RE = re.compile(r"\s*- (?P<cid>\d+/\d+[\w]*): (?P<text>.*?)\s*$")
_ITEM_ACCESSORS = ("ListGetItemGuardAccessor", "TupleGetItemGuardAccessor")


# --------------------------------------------------------------------------------------------
# The summary


class GuardFlag(BaseModel):
    """A guard shape that lets a compiled entry be reused for inputs it was not traced for."""

    kind: str = Field(description="no_length_guard or no_tensor_match")
    source: str = Field(description="the guarded source, e.g. L['xs']")
    type: str | None = None
    compile_ids: list[str] = Field(default_factory=list, description="the compiled entries that show it")
    missing: str = Field(description="the guard builder that should have guarded it, e.g. SEQUENCE_LENGTH")
    wrapped_by: str = Field(description="the VariableBuilder method that wraps this kind of value")
    text: str


class InputGuards(BaseModel):
    """One input of a compiled frame and the guards on it and on what was read from it."""

    source: str = Field(description="e.g. L['xs']")
    type: str | None = Field(None, description="its Python type as the guard tree shows it")
    guards: list[str] = Field(default_factory=list, description="guard kinds on the source itself")
    checks: list[str] = Field(default_factory=list, description="what those guards assumed (lengths, values, "
                                                                "tensor dtype/size/stride)")
    items: list[str] = Field(default_factory=list, description="sub-sources that are guarded (items, attributes), "
                                                               "relative to the source; at most a few shown")
    item_count: int = Field(0, description="how many sub-sources are guarded, in all")
    item_guards: dict[str, int] = Field(default_factory=dict, description="guard kind -> how many on sub-sources")
    flags: list[str] = Field(default_factory=list)


class CompiledEntry(BaseModel):
    compile_id: str = Field(description="'frame/recompile', e.g. 0/1 (the second entry of frame 0)")
    code: str | None = Field(None, description="the user code the guards came from: 'file.py:LINE in fn'")
    recompiled_because: str | None = Field(None, description="the guard of the previous entry that failed")
    inputs: list[InputGuards] = Field(default_factory=list, description="flagged inputs first; for a recompile, "
                                                                        "only those whose guards changed")
    unchanged_from: str | None = Field(None, description="a recompile: the previous entry of the frame, whose "
                                                         "guards the inputs not listed still have")
    unchanged: int = Field(0, description="inputs left out because their guards did not change")
    inputs_left_out: int = 0
    globals_guarded: int = Field(0, description="globals (G[...]) guarded, not listed")
    shape_guards: int = Field(0, description="symbolic shape guards on the root")


class ReplayedMutation(BaseModel):
    """An object of the caller's that the compiled code mutated: Dynamo replays the mutation after the graph ran."""

    type: str = Field(description="its Python type, e.g. dict")
    source: str = Field(description="where Dynamo found it, e.g. L['state']")
    statements: list[str] = Field(default_factory=list, description=(
        "the script's statements that mutated it, innermost frame of each user stack: 'file.py:LINE `code`'"))


class DynamoDecisions(BaseModel):
    """How many entries Dynamo compiled, whether later calls recompiled, and the guards on each input."""

    frames: int = Field(0, description="distinct frames (code objects) Dynamo compiled")
    compiled_entries: int = Field(0, description="compiled entries with guards (first compiles and recompiles)")
    recompiles: int = 0
    recompiled: bool | None = Field(None, description="None: the recompiles log was off and nothing else tells")
    statement: str = Field(description="in words: what was compiled, and whether later calls recompiled")
    entries: list[CompiledEntry] = Field(default_factory=list)
    entries_left_out: int = 0
    flags: list[GuardFlag] = Field(default_factory=list, description="guard shapes that let an entry be reused "
                                                                     "for inputs it was not traced for")
    mutations: list[ReplayedMutation] = Field(default_factory=list, description=(
        "objects of the caller's the compiled code mutated, which Dynamo writes back after the graph ran "
        "(the side_effects log)"))
    run_id: str | None = Field(None, description="the run the logs came from")
    logs: str = Field(GUARD_LOGS, description="the TORCH_LOGS the run had")


# --------------------------------------------------------------------------------------------
# Parsing the guard trees


@dataclass
class _Node:
    depth: int
    source: str | None = None
    accessor: str | None = None
    type: str | None = None
    guards: list[tuple[str, str]] = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)


@dataclass
class _Entry:
    cid: str
    root: _Node = field(default_factory=lambda: _Node(depth=0))
    shape_guards: int = 0


@dataclass
class _Recompile:
    cid: str | None
    function: str
    where: str
    reason: str | None = None


def _frame_of(cid: str) -> str:
    return cid.split("/", 1)[0]


def _strip_comment(text: str) -> str:
    return _COMMENT_SPLIT_RE.split(text, maxsplit=1)[0].strip()


class _Parser:
    def __init__(self) -> None:
        self.entries: list[_Entry] = []
        self.recompiles: list[_Recompile] = []
        self._entry: _Entry | None = None
        self._stack: list[_Node] = []
        self._recompile: _Recompile | None = None
        self._anonymous = 0

    def feed(self, raw: str) -> None:
        cid, body = split_log_line(raw)
        stripped = body.strip()
        if stripped == "TREE_GUARD_MANAGER:":
            if cid is None:
                self._anonymous += 1
            self._entry = _Entry(cid or f"?/{self._anonymous - 1}")
            self.entries.append(self._entry)
            self._stack = []
            return
        if body.startswith("Recompiling function "):
            m = _RECOMPILE_RE.search(body)
            if m:
                self._recompile = _Recompile(cid, m.group("fn"), m.group("where"))
                if cid is None or all(r.cid != cid for r in self.recompiles):  # logged once per artifact that is on
                    self.recompiles.append(self._recompile)
                return
        if self._recompile is not None and self._recompile.reason is None and (cid is None or
                                                                                cid == self._recompile.cid):
            m = _FAILURE_RE.match(body)
            if m:
                self._recompile.reason = _strip_comment(m.group("text"))
                return
        if self._entry is None:
            return
        prefixed = not self._entry.cid.startswith("?")
        if cid is not None and cid != self._entry.cid:
            self._entry = None  # another compile's record: this tree is over
            return
        if prefixed and cid is None:
            return  # output interleaved with the record (print, warnings)
        tree = _TREE_RE.match(body)
        if tree is None:
            if stripped and not prefixed:
                self._entry = None  # without prefixes, the first other line ends the tree
            return
        self._node_line(len(tree.group("bars")) // 2, tree.group("rest"))

    def _node_line(self, depth: int, rest: str) -> None:
        entry = self._entry
        assert entry is not None
        while self._stack and self._stack[-1].depth >= depth:
            self._stack.pop()
        guard = _GUARD_RE.match(rest)
        if guard is not None:
            text = guard.group("text") or ""
            if depth == 0:
                entry.shape_guards += 1
            owner = self._stack[-1] if self._stack else entry.root
            owner.guards.append((guard.group("kind"), text))
            return
        if rest == "RootGuardManager":
            entry.root = _Node(depth=0)
            self._stack = [entry.root]
            return
        manager = _MANAGER_RE.match(rest)
        node = _Node(depth=depth)
        if manager is not None:
            node.source, node.accessor, node.type = manager.group("source"), manager.group("accessor"), \
                manager.group("type")
        parent = self._stack[-1] if self._stack else entry.root
        parent.children.append(node)
        self._stack.append(node)


def _walk(node: _Node) -> Iterable[_Node]:
    for child in node.children:
        yield child
        yield from _walk(child)


def _managed(node: _Node) -> Iterable[_Node]:
    """The sources below a node, looking through structural nodes (dict key/value pairs)."""
    for child in node.children:
        if child.source is not None:
            yield child
        else:
            yield from _managed(child)


def _kinds(node: _Node) -> list[str]:
    return list(dict.fromkeys(kind for kind, _ in node.guards))


def _check_text(kind: str, text: str) -> str | None:
    if kind == "TENSOR_MATCH":
        m = _TENSOR_RE.search(text)
        if m:
            grad = ", requires_grad" if m.group("rg") == "True" else ""
            return f"tensor {m.group('dtype')} size={m.group('size')} stride={m.group('stride')}{grad}"
        return None
    if kind in _SHOWN_CHECKS:
        return _strip_comment(text)[:100]
    return None


def _relative(child: str, parent: str) -> str:
    return child[len(parent):] if child.startswith(parent) else child


def _is_item(child: _Node, parent: _Node) -> bool:
    accessor = child.accessor or ""
    if accessor.startswith(_ITEM_ACCESSORS):
        return True
    return bool(parent.source and child.source and re.fullmatch(re.escape(parent.source) + r"\[\d+\]", child.source))


def _flags_of(node: _Node, cid: str) -> list[GuardFlag]:
    """Guard shapes on one source that let a stale entry be reused."""
    found: list[GuardFlag] = []
    kinds = set(_kinds(node))
    items = [c for c in _managed(node) if _is_item(c, node)]
    source = node.source or "?"
    type_name = node.type
    is_sequence = type_name in SEQUENCE_TYPES or bool(items)
    if is_sequence and items and not kinds & LENGTH_GUARDS:
        listed = ", ".join(_relative(c.source or "?", source) for c in items[:MAX_ITEMS_SHOWN])
        more = f" (+{len(items) - MAX_ITEMS_SHOWN})" if len(items) > MAX_ITEMS_SHOWN else ""
        wrapper = "VariableBuilder.wrap_listlike" if type_name in SEQUENCE_TYPES else "VariableBuilder._wrap"
        found.append(GuardFlag(
            kind="no_length_guard", source=source, type=type_name, compile_ids=[cid], missing="SEQUENCE_LENGTH",
            wrapped_by=wrapper,
            text=(f"{source} ({type_name or 'sequence'}): items {listed}{more} are guarded but its length is not "
                  f"(no LENGTH_CHECK/SEQUENCE_LENGTH guard): a call with a longer {type_name or 'sequence'} passes "
                  f"every guard of entry {cid} and reuses its graph, traced for {len(items)} items"),
        ))
    if type_name in TENSOR_TYPES and node.guards and not kinds & {"TENSOR_MATCH", "ID_MATCH"}:
        found.append(GuardFlag(
            kind="no_tensor_match", source=source, type=type_name, compile_ids=[cid], missing="TENSOR_MATCH",
            wrapped_by="VariableBuilder.wrap_tensor",
            text=(f"{source} ({type_name}) has guards ({', '.join(sorted(kinds))}) but no TENSOR_MATCH: a tensor "
                  f"of another dtype, shape or device passes the guards of entry {cid}"),
        ))
    return found


def _summarise_input(node: _Node) -> InputGuards:
    source = node.source or "?"
    checks = [c for c in (_check_text(kind, text) for kind, text in node.guards) if c]
    below = [n for n in _walk(node) if n.source is not None]
    item_guards: Counter[str] = Counter(kind for n in below for kind, _ in n.guards)
    children = [c for c in _managed(node)]
    return InputGuards(
        source=source, type=node.type, guards=_kinds(node), checks=list(dict.fromkeys(checks))[:4],
        items=[_relative(c.source or "?", source) for c in children[:MAX_ITEMS_SHOWN]], item_count=len(below),
        item_guards=dict(item_guards.most_common()),
    )


def _code_of(entry: _Entry) -> str | None:
    """The user code most of the entry's input guards came from."""
    places: Counter[str] = Counter()
    for top in entry.root.children:
        if not (top.source or "").startswith("L["):
            continue
        for node in [top, *_walk(top)]:
            for _kind, text in node.guards:
                m = _USER_CODE_RE.search(text)
                if m and "_dynamo/" not in m.group("file"):
                    places[f"{m.group('file').rsplit('/', 1)[-1]}:{m.group('line')} in {m.group('fn')}"] += 1
    return places.most_common(1)[0][0] if places else None


def _entry_summary(entry: _Entry, reasons: dict[str, str]) -> tuple[CompiledEntry, list[GuardFlag]]:
    inputs: list[InputGuards] = []
    flags: list[GuardFlag] = []
    globals_guarded = 0
    for top in entry.root.children:
        source = top.source or ""
        if source == "G" or source.startswith("G["):
            globals_guarded += sum(1 for n in _walk(top) if n.source is not None and n.source.startswith("G["))
            continue
        if not source.startswith("L["):
            continue
        summary = _summarise_input(top)
        for node in [top, *(n for n in _walk(top) if n.source is not None)]:
            for flag in _flags_of(node, entry.cid):
                flags.append(flag)
                summary.flags.append(flag.kind + (f" at {flag.source}" if flag.source != summary.source else ""))
        inputs.append(summary)
    inputs.sort(key=lambda i: (not i.flags, i.source))
    compiled = CompiledEntry(
        compile_id=entry.cid, code=_code_of(entry), recompiled_because=reasons.get(entry.cid),
        inputs=inputs[:MAX_INPUTS], inputs_left_out=max(0, len(inputs) - MAX_INPUTS),
        globals_guarded=globals_guarded, shape_guards=entry.shape_guards,
    )
    return compiled, flags


def _drop_unchanged(summaries: list[CompiledEntry]) -> None:
    """A recompile lists only the inputs whose guards differ from the frame's previous entry."""
    previous: dict[str, tuple[str, dict[str, InputGuards]]] = {}
    for entry in summaries:
        frame = _frame_of(entry.compile_id)
        before = previous.get(frame)
        previous[frame] = (entry.compile_id, {i.source: i for i in entry.inputs})
        if before is None:
            continue
        changed = [i for i in entry.inputs if before[1].get(i.source) != i]
        entry.unchanged_from, entry.unchanged = before[0], len(entry.inputs) - len(changed)
        entry.inputs = changed


def _merge_flags(flags: list[GuardFlag]) -> list[GuardFlag]:
    merged: dict[tuple[str, str], GuardFlag] = {}
    for flag in flags:
        key = (flag.kind, flag.source)
        if key in merged:
            merged[key].compile_ids = list(dict.fromkeys([*merged[key].compile_ids, *flag.compile_ids]))
        else:
            merged[key] = flag.model_copy(deep=True)
    return list(merged.values())


def _times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"


def _statement(entries: list[_Entry], recompiles: list[_Recompile], recompiles_logged: bool | None,
               flags: list[GuardFlag], codes: dict[str, str | None]) -> str:
    frames: dict[str, list[str]] = {}
    for entry in entries:
        frames.setdefault(_frame_of(entry.cid), []).append(entry.cid)
    by_frame: dict[str, list[_Recompile]] = {}
    for r in recompiles:
        by_frame.setdefault(_frame_of(r.cid) if r.cid else "?", []).append(r)
    parts: list[str] = []
    for frame in sorted(set(frames) | set(by_frame), key=lambda f: (not f.isdigit(), int(f) if f.isdigit() else 0)):
        ids = frames.get(frame, [])
        recs = by_frame.get(frame, [])
        name = recs[0].function if recs else None
        code = next((codes[c] for c in ids if codes.get(c)), None)
        label = f"frame {frame}" + (f" ({name})" if name else f" ({code})" if code else "")
        text = f"{label} compiled {_times(len(ids))} ({', '.join(ids)})" if ids else f"{label} recompiled"
        if recs:
            reasons = "; ".join(f"{r.cid or '?'} because {r.reason or 'a guard failed'} failed" for r in recs[:4])
            text += f"; later calls recompiled it {_times(len(recs))}: {reasons}"
        elif recompiles_logged and len(ids) == 1:
            text += (f"; no later call recompiled it: every call after the first ran entry {ids[0]}'s graph, "
                     "its guards accepted the new inputs")
        elif not recompiles_logged:
            text += "; the recompiles log was off, so whether later calls recompiled is not shown"
        parts.append(text)
    if not parts and recompiles_logged:
        parts.append("no recompile was logged: no compiled function was recompiled (the guards log shows what "
                     "was compiled and guarded: TORCH_LOGS=guards,recompiles)")
    elif not parts:
        parts.append("no compiled entry and no recompile in the logs (was torch.compile reached, "
                     "and were the guards/recompiles logs on?)")
    statement = ". ".join(parts) + "."
    if flags:
        statement += " Suspicious guards: " + " | ".join(f.text for f in flags[:3]) + "."
    return statement


def summarise_guards(text: str, *, recompiles_logged: bool | None = None, run_id: str | None = None,
                     logs: str = GUARD_LOGS) -> DynamoDecisions:
    """Dynamo's compiled entries, recompiles and per-input guards from TORCH_LOGS output.

    `recompiles_logged`: whether the ``recompiles`` artifact was on (so that no recompile line means
    none happened); None: only a recompile line in the text tells."""
    parser = _Parser()
    for line in text.splitlines():
        parser.feed(line)
    entries = [e for e in parser.entries if e.root.children or e.root.guards]
    reasons = {r.cid: r.reason for r in parser.recompiles if r.cid and r.reason}
    summaries: list[CompiledEntry] = []
    flags: list[GuardFlag] = []
    for entry in entries:
        summary, found = _entry_summary(entry, reasons)
        summaries.append(summary)
        flags.extend(found)
    _drop_unchanged(summaries)
    flags = _merge_flags(flags)
    logged = recompiles_logged if recompiles_logged is not None else (True if parser.recompiles else None)
    frames = {_frame_of(e.cid) for e in entries} | {_frame_of(r.cid) for r in parser.recompiles if r.cid}
    recompiled: bool | None
    if parser.recompiles or any(not e.cid.endswith("/0") and not e.cid.startswith("?") for e in entries):
        recompiled = True
    else:
        recompiled = False if logged else None
    codes = {s.compile_id: s.code for s in summaries}
    mutations = replayed_mutations(text)
    statement = _statement(entries, parser.recompiles, logged, flags, codes)
    if mutations:
        made = "; ".join(f"{m.type} {m.source}" + (f" (by {', '.join(m.statements)})" if m.statements else "")
                         for m in mutations)
        statement = statement.rstrip(".") + (
            f". After the graph ran, Dynamo wrote back its mutations of {made}: a value the script finds "
            "wrong in one of them was lost or changed in that replay (the variable tracker of its type records each "
            "mutation; torch/_dynamo/side_effects.py replays them)")
    return DynamoDecisions(
        frames=len(frames), compiled_entries=len(entries), recompiles=len(parser.recompiles), recompiled=recompiled,
        statement=statement, entries=summaries[:MAX_ENTRIES], entries_left_out=max(0, len(summaries) - MAX_ENTRIES),
        flags=flags, mutations=mutations, run_id=run_id, logs=logs,
    )


_MUTATING = re.compile(r"Mutating object of type (?P<type>\S+) \(source name: (?P<source>.*?)\)(?: \(unable .*)?\s*$")
_SIDE_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')
MAX_STATEMENTS = 4


def replayed_mutations(text: str) -> list[ReplayedMutation]:
    """The side_effects log's `Mutating object of type T (source name: S)` records, each with the innermost frame
    of every user stack under it (the statement that made the mutation), in the order logged, one per source."""
    found: dict[str, ReplayedMutation] = {}
    current: ReplayedMutation | None = None
    where: str | None = None  # the last frame's file:line, until its code line comes
    statement: str | None = None  # the last frame with its code: the innermost once the stack ends

    def flush() -> None:
        if current is not None and statement is not None and statement not in current.statements \
                and len(current.statements) < MAX_STATEMENTS:
            current.statements.append(statement)

    for raw in text.splitlines():
        if "[__side_effects]" not in raw:
            continue
        line = split_log_line(raw)[1]
        body = line.strip()
        if (m := _MUTATING.search(line)) is not None:
            flush()
            current = found.setdefault(m["source"], ReplayedMutation(type=m["type"], source=m["source"]))
            where = statement = None
        elif (f := _SIDE_FRAME.search(line)) is not None:
            where = f"{basename(f['file'])}:{f['line']}"
        elif where is not None and body and not set(body) <= set("^~ "):
            statement, where = f"{where} `{body[:100]}`", None
        elif not body or body.startswith("****"):
            flush()
            statement = None
    flush()
    return list(found.values())


def has_guard_trees(text: str) -> bool:
    return "TREE_GUARD_MANAGER:" in text


def logs_recompiles(spec: str | None) -> bool:
    """Whether a TORCH_LOGS spec turns on the recompile reasons."""
    names = {entry.strip().lstrip("+-") for entry in (spec or "").split(",")}
    return bool(names & {"recompiles", "recompiles_verbose"})
