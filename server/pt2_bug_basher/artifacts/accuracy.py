"""For an accuracy failure: the generated kernels that compute the graph output that came out wrong.

A wrong result raises in the user's comparison, far from the kernel that computed it, so no traceback
frame points at generated code. What the artifacts do tell: which wrapper call writes each buffer the
graph returns (analysis.dataflow), the ops each kernel fuses (provenance tracking, the source-node
comments, the post-grad FX graph), and the kernel's code.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.dataflow import Call, DataFlow, data_flow
from pt2_bug_basher.artifacts.graphs import Graph
from pt2_bug_basher.artifacts.index import artifact_uri, page_of_line

MAX_OUTPUT_KERNELS = 4
EXCERPT_CHARS = 1200
NAMED_ITEM = "(the item the assertion names)"
_ROLE_ORDER = {"inference": 0, "forward": 0, "unknown": 1, "backward": 2}


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
