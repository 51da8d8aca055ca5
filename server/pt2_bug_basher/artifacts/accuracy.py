"""For an accuracy failure: the generated kernels that compute the graph output that came out wrong.

A wrong result raises in the user's comparison, far from the kernel that computed it, so no traceback
frame points at generated code. What the artifacts do tell: which wrapper call writes each buffer the
graph returns (analysis.dataflow), the ops each kernel fuses (provenance tracking, the source-node
comments, the post-grad FX graph), and the kernel's code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.dataflow import Call, DataFlow, data_flow
from pt2_bug_basher.artifacts.graphs import Graph
from pt2_bug_basher.artifacts.index import artifact_uri, page_of_line

MAX_OUTPUT_KERNELS = 4
EXCERPT_CHARS = 1200
NAMED_ITEM = "(the item the assertion names)"
_ROLE_ORDER = {"inference": 0, "forward": 0, "unknown": 1, "backward": 2}


class KernelOrigin(BaseModel):
    function: str = Field(description="the function of torch/_inductor, as Class.method")
    file: str
    line: int = Field(description="the line of its `def`")
    wrote: int = Field(0, description="lines of the kernel it wrote (IndentedBuffer.writeline)")
    made: int = Field(0, description="lines of the kernel holding code text it returned (an op's expression, an "
                                     "index, a mask)")
    first: str = Field(description="the first such line of the kernel (of those that compute its outputs, if any)")


class OutputKernel(BaseModel):
    graph: str
    name: str = Field(description="the generated kernel, or the extern call (extern_kernels.mm, aten op)")
    kind: str = Field(description="cpp, triton ..., or extern (a library call, not generated code)")
    role: str = Field(description="which graph output it writes, or which writer it feeds")
    aten_ops: list[str] = Field(default_factory=list, description="the ops it computes")
    fx_nodes: list[str] = Field(default_factory=list, description="post-grad FX nodes it computes")
    fx_nodes_from: str | None = None
    call_line: int = Field(description="the line of output_code.py that calls it")
    line: int | None = Field(None, description="the line of output_code.py where the kernel is defined")
    output_code: str = Field(description="resource URI of the page of output_code.py with that line")
    excerpt: str | None = Field(None, description="the kernel's code, boilerplate left out (bounded)")
    origins: list[KernelOrigin] = Field(
        default_factory=list,
        description="the code-generation functions that produced the kernel's lines (recorded while the run "
                    "generated it): first those of the lines that compute and store its outputs; read them beside "
                    "the excerpt")


def output_kernels(graphs: list[Graph], item: int | None, case_id: str, stamp: str) -> list[OutputKernel]:
    """The calls that write the graph outputs (only output `item` when the item the assertion names can be
    one: a single forward graph with that many outputs), then the ones that write what those read, forward
    graphs before backward ones."""
    found: list[OutputKernel] = []
    ordered = sorted((g for g in graphs if g.code is not None), key=lambda g: _ROLE_ORDER.get(g.role, 1))
    if sum(g.role in ("inference", "forward") for g in ordered) > 1:
        item = None  # graph breaks: the compared item is not one graph's output of the same index
    for graph in ordered:
        flow = data_flow(graph.code)  # type: ignore[arg-type]
        if flow is None or not flow.outputs:
            continue
        indices = [item] if item is not None and item < len(flow.outputs) else range(len(flow.outputs))
        writers: dict[int, list[int]] = {}
        for index in indices:
            buffer = flow.outputs[index]
            writer = flow.writer(buffer) if buffer else None
            if writer is not None:
                writers.setdefault(writer, []).append(index)
        for writer, outputs in sorted(writers.items()):
            which = ", ".join(str(i) for i in outputs)
            note = f" {NAMED_ITEM}" if item is not None and outputs == [item] else ""
            call = flow.calls[writer]
            focus = _param_of(flow, call, flow.outputs[outputs[0]]) if len(outputs) == 1 else None
            found.append(_entry(graph, call, f"writes graph output {which}{note}", case_id, stamp, focus))
        for writer in sorted(writers):
            for feeder in _feeders(flow, writer):
                call = flow.calls[feeder]
                found.append(_entry(graph, call, f"feeds {flow.calls[writer].callee} (writes "
                                                 f"{', '.join(_shared(flow, call, flow.calls[writer]))})",
                                    case_id, stamp))
    unique: dict[tuple[str, int], OutputKernel] = {}
    for entry in found:
        unique.setdefault((entry.graph, entry.call_line), entry)
    return list(unique.values())[:MAX_OUTPUT_KERNELS]


def _feeders(flow: DataFlow, writer: int) -> list[int]:
    feeders: list[int] = []
    for read in flow.calls[writer].reads:
        feeder = flow.writer(read, before=writer)
        if feeder is not None and feeder not in feeders:
            feeders.append(feeder)
    return feeders


def _param_of(flow: DataFlow, call: Call, buffer: str | None) -> str | None:
    """The kernel parameter a buffer is passed to the call as (out_ptr1), under any of its names."""
    wanted = flow.root(buffer) if buffer else None
    return next((param for arg, param in call.params.items() if flow.root(arg) == wanted), None)


def _shared(flow: DataFlow, feeder: Call, reader: Call) -> list[str]:
    read = {flow.root(r) for r in reader.reads}
    return [w for w in feeder.writes if flow.root(w) in read] or feeder.writes


def _entry(graph: Graph, call: Call, role: str, case_id: str, stamp: str, focus: str | None = None) -> OutputKernel:
    kernel = call.kernel
    line = kernel.start if kernel is not None else call.line
    entry = OutputKernel(
        graph=graph.name, name=kernel.name if kernel else call.callee, kind=kernel.kind if kernel else "extern",
        role=role, call_line=call.line, line=kernel.start if kernel else None,
        output_code=artifact_uri(case_id, f"{stamp}/{graph.rel}/output_code.py",
                                 page_of_line(graph.output_code_path(), line)),
    )
    if kernel is not None:
        nodes, source, _ = graph.kernel_nodes(kernel)
        entry.excerpt = kernel.excerpt(EXCERPT_CHARS, focus)
    else:
        nodes, source = graph.call_nodes(call.callee, call.handle), "provenance tracking"
    entry.fx_nodes, entry.fx_nodes_from = nodes[:20], source if nodes else None
    entry.aten_ops = graph.ops_of(nodes) or (kernel.aten_ops if kernel else [])
    return entry


MAX_ORIGINS = 8
MIN_MADE_CHARS = 5  # shorter returned texts (`1.0`, `x0 `) sit in too many lines to tell anything
_TMP_DEFINED = re.compile(r"\b(tmp\d+)\s*=(?!=)")
_TMP_USED = re.compile(r"\btmp\d+\b")
# a store to an output: `out_ptr0[x0] = tmp1;`, `tmp4.store(out_ptr0 + x0)`, `tl.store(out_ptr0 + x0, tmp4, xmask)`,
# an atomic add into one
_OUTPUT_STORE = re.compile(r"\b(?:in_)?out_ptr\d+\s*\[[^\]]*\]\s*=(?!=)|\.store\(\s*(?:in_)?out_ptr\d+"
                           r"|atomic_add\(\s*&?\s*(?:in_)?out_ptr\d+")


def load_origins(path: Path) -> dict | None:
    """What `launcher.py --kernel-origins` recorded: {"wrote": {line: [...]}, "made": {text: [...]}}."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("wrote"), dict) else None


def _output_slice(lines: list[str]) -> list[int]:
    """The lines that store an output (out_ptrN) and, back through the tmpN they use, the lines that compute
    what they store, in reading order."""
    defined: dict[str, list[int]] = {}
    for n, line in enumerate(lines):
        for name in _TMP_DEFINED.findall(line):
            defined.setdefault(name, []).append(n)
    todo = [n for n, line in enumerate(lines) if _OUTPUT_STORE.search(line)]
    seen = set(todo)
    while todo:
        n = todo.pop()
        for name in _TMP_USED.findall(lines[n]):
            for m in defined.get(name, []):
                if m < n and m not in seen:
                    seen.add(m)
                    todo.append(m)
    return sorted(seen)


def kernel_origins(body: str, origins: dict) -> list[KernelOrigin]:
    """The functions that wrote the kernel's lines, or made code text in them: first those of the lines that
    compute and store its outputs, then the rest; in each, those that produced fewest of its lines first (sorted
    stably, so reading order breaks ties, and on a line the one that made its text comes before the one that
    wrote it out). The definition line (the wrapper's) is left out."""
    wrote: dict[str, list] = origins.get("wrote") or {}
    made = [(text, who) for text, who in (origins.get("made") or {}).items()
            if len(text) >= MIN_MADE_CHARS and "\n" not in text and not text.replace(".", "").isdigit()]
    lines = [raw.strip() for raw in body.splitlines()[1:] if raw.strip()]
    computing = _output_slice(lines)
    order = computing + [n for n in range(len(lines)) if n not in set(computing)]
    found: dict[tuple[str, str, int], KernelOrigin] = {}

    def add(row: list, line: str, how: str) -> None:
        file, function, first = str(row[0]), str(row[1]), row[2]
        if not isinstance(first, int) or function.rsplit(".", 1)[-1].startswith("<"):
            return
        entry = found.setdefault((file, function, first), KernelOrigin(function=function, file=file, line=first,
                                                                       first=line[:90]))
        setattr(entry, how, getattr(entry, how) + 1)

    slice_of: dict[tuple[str, str, int], bool] = {}
    for n in order:
        line = lines[n]
        before = set(found)
        for _text, who in sorted((m for m in made if m[0] in line), key=lambda m: -len(m[0])):
            for row in who:
                add(row, line, "made")
        for row in wrote.get(line, []):
            add(row, line, "wrote")
        for key in set(found) - before:
            slice_of[key] = n in set(computing)
    # those of the computing lines first; among them, the ones that produced fewest of its lines (the relu
    # override that made one expression) before the helpers every line goes through (index formatting, CSE)
    ranked = sorted(found, key=lambda key: (not slice_of[key], found[key].wrote + found[key].made))
    return [found[key] for key in ranked][:MAX_ORIGINS]
