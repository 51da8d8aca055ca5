"""A compiled graph's debug directory: its FX graphs, generated code and provenance, loaded and summarised."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.output_code import Kernel, OutputCode, parse_output_code
from pt2_bug_basher.artifacts.fx_graph import FxGraphStats, parse_fx_graph
from pt2_bug_basher.artifacts.index import BINARY_SUFFIXES, artifact_uri, read_text

# Caps that keep a tool result within a few KB; index.json holds everything.
MAX_OPS_SHOWN = 10
MAX_INPUTS_SHOWN = 6
MAX_KERNELS_SHOWN = 8
MAX_FX_NODES_SHOWN = 12

_ROLE_RE = re.compile(r"_(forward|backward|inference)_")
_AOT_ID_RE = re.compile(r"^# AOT ID: \['[^']*_(forward|backward|inference)'\]", re.M)


class KernelInfo(BaseModel):
    name: str
    kind: str = Field(description="cpp, triton pointwise/reduction/persistent reduction/template, or the "
                                  "async_compile method")
    line: int | None = Field(None, description="line of its definition in output_code.py")
    fx_nodes: list[str] = Field(default_factory=list, description="post-grad FX nodes it computes")
    fx_nodes_from: str | None = Field(None, description="provenance tracking, output_code comments or the kernel name")


class GraphSummary(BaseModel):
    name: str = Field(description="the graph's debug directory name")
    role: str = Field(description="forward, backward, inference or unknown")
    compile_id: str | None = Field(None, description="Dynamo's compile id ([frame/compile]) when stderr named it")
    dir_uri: str = Field(description="resource URI prefix of the graph's files")
    files: list[str] = Field(description="file names under dir_uri")
    node_count: int | None = Field(None, description="FX nodes of the graph Inductor received "
                                                     "(placeholders + calls + output), from fx_graph_readable.py")
    node_count_after_passes: int | None = Field(None, description="the same for fx_graph_transformed.py")
    op_total: int = Field(0, description="call nodes")
    ops: dict[str, int] = Field(default_factory=dict, description="op -> count, most used first (capped)")
    distinct_ops: int = 0
    subgraphs: int = 0
    inputs: list[str] = Field(default_factory=list, description='"name: dtype[shape][stride]device" as printed '
                                                             "(capped; input_count has them all)")
    input_count: int = 0
    kernel_count: int = Field(0, description="kernels Inductor generated (C++ or Triton)")
    kernels: list[KernelInfo] = Field(default_factory=list, description="capped")
    extern_calls: dict[str, int] = Field(default_factory=dict, description="extern_kernels.* calls (mm, addmm, ...)")
    has_output_code: bool = False
    related: dict[str, str] = Field(default_factory=dict,
                                    description="tlparse artifacts of the same compile (trace=True)")


@dataclass
class Graph:
    path: Path
    rel: str
    name: str
    role: str
    compile_id: str | None
    files: list[str]
    fx: FxGraphStats | None
    fx_after: FxGraphStats | None
    code: OutputCode | None
    provenance: dict[str, Any]

    def output_code_path(self) -> Path:
        return self.path / "output_code.py"

    def kernel_nodes(self, kernel: Kernel) -> tuple[list[str], str | None, list[str]]:
        """Post-grad FX nodes of a kernel, where they came from, and pre-grad nodes."""
        code_to_post = self.provenance.get("cppCodeToPost") or self.provenance.get("tritonCodeToPost") or {}
        post: list[str] = []
        if kernel.handle and kernel.handle in code_to_post:
            post = list(code_to_post[kernel.handle])
        else:
            for key, nodes in code_to_post.items():
                if str(key).split(":", 1)[0] == kernel.name:
                    post = list(nodes)
                    break
        if post:
            post_to_pre = self.provenance.get("postToPre") or {}
            pre = sorted({p for n in post for p in post_to_pre.get(n, [])})
            return post, "provenance tracking", pre
        if kernel.source_nodes:
            return kernel.source_nodes, "output_code comments", []
        graph = self.fx_after or self.fx
        if graph is not None:
            tokens = kernel.name.split("_fused_", 1)[-1].rsplit("_", 1)[0].split("_")
            guessed = [n for n in graph.node_names if re.sub(r"_\d+$", "", n) in tokens]
            if guessed:
                return guessed, "kernel name (no provenance for this kernel)", []
        return [], None, []

    def ops_of(self, nodes: list[str]) -> list[str]:
        """The ops of post-grad FX nodes in graph order, as fx_graph_transformed.py (else fx_graph_readable.py)
        prints them."""
        graph = self.fx_after or self.fx
        if graph is None:
            return []
        order = {name: n for n, name in enumerate(graph.node_names)}
        ordered = sorted((n for n in nodes if n in graph.node_ops), key=lambda n: order.get(n, len(order)))
        return list(dict.fromkeys(graph.node_ops[n] for n in ordered))

    def call_nodes(self, callee: str, handle: str | None) -> list[str]:
        """Post-grad FX nodes of an extern call (extern_kernels.mm), from provenance tracking: by the call's
        debug handle, else by name when only one entry has that name."""
        code_to_post = self.provenance.get("cppCodeToPost") or self.provenance.get("tritonCodeToPost") or {}
        if handle and handle in code_to_post:
            return list(code_to_post[handle])
        named = [nodes for key, nodes in code_to_post.items() if str(key).split(":", 1)[0] == callee]
        return list(named[0]) if len(named) == 1 else []


_DEBUG_TRACE_RE = re.compile(r"\[(\d+/\d+(?:_\d+)?)\]\s+\S+ debug trace: (\S+)\s*$", re.M)


def compile_ids_from_stderr(text: str) -> dict[str, str]:
    """Inductor logs `[0/0] model__0_forward_1 debug trace: <dir>` as each graph's compile ends."""
    return {Path(path).name: f"[{cid}]" for cid, path in _DEBUG_TRACE_RE.findall(text)}


def load_graph(path: Path, debug_dir: Path, compile_ids: dict[str, str]) -> Graph:
    files = sorted(p.name for p in path.iterdir() if p.is_file() and p.suffix not in BINARY_SUFFIXES)
    role_match = _ROLE_RE.search(path.name)
    code_text = read_text(path / "output_code.py") if "output_code.py" in files else None
    role = role_match.group(1) if role_match else None
    if role is None and code_text:
        aot = _AOT_ID_RE.search(code_text)
        role = aot.group(1) if aot else None
    fx_text = read_text(path / "fx_graph_readable.py") if "fx_graph_readable.py" in files else None
    after_text = read_text(path / "fx_graph_transformed.py") if "fx_graph_transformed.py" in files else None
    provenance: dict[str, Any] = {}
    for name in files:
        if "provenance" in name and name.endswith(".json"):
            try:
                loaded = json.loads(read_text(path / name) or "{}")
            except ValueError:
                loaded = {}
            if isinstance(loaded, dict):
                provenance.update(loaded)
    return Graph(
        path=path, rel=path.relative_to(debug_dir).as_posix(), name=path.name, role=role or "unknown",
        compile_id=compile_ids.get(path.name), files=files,
        fx=parse_fx_graph(fx_text) if fx_text else None,
        fx_after=parse_fx_graph(after_text) if after_text else None,
        code=parse_output_code(code_text) if code_text else None, provenance=provenance,
    )


def summarise_graph(graph: Graph, case_id: str, stamp: str, *, capped: bool = True) -> GraphSummary:
    cap = (lambda items, n: items[:n]) if capped else (lambda items, n: items)
    summary = GraphSummary(
        name=graph.name, role=graph.role, compile_id=graph.compile_id,
        dir_uri=artifact_uri(case_id, f"{stamp}/{graph.rel}") + "/", files=graph.files,
        has_output_code=graph.code is not None,
    )
    if graph.fx is not None:
        summary.node_count = graph.fx.node_count
        summary.op_total = sum(graph.fx.ops.values())
        summary.distinct_ops = len(graph.fx.ops)
        summary.ops = dict(cap(graph.fx.ops.most_common(), MAX_OPS_SHOWN))
        summary.inputs = [f"{i.name}: {i.annotation}" if i.annotation else i.name
                          for i in cap(graph.fx.inputs, MAX_INPUTS_SHOWN)]
        summary.input_count = len(graph.fx.inputs)
        summary.subgraphs = graph.fx.subgraphs
    if graph.fx_after is not None:
        summary.node_count_after_passes = graph.fx_after.node_count
    if graph.code is not None:
        summary.kernel_count = len(graph.code.kernels)
        summary.extern_calls = dict(graph.code.extern_calls.most_common())
        kernels = []
        for kernel in cap(graph.code.kernels, MAX_KERNELS_SHOWN):
            nodes, source, _ = graph.kernel_nodes(kernel)
            kernels.append(KernelInfo(name=kernel.name, kind=kernel.kind, line=kernel.start,
                                      fx_nodes=cap(nodes, MAX_FX_NODES_SHOWN), fx_nodes_from=source))
        summary.kernels = kernels
    return summary
