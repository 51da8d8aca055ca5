"""Step 8: rerun a repro with TORCH_COMPILE_DEBUG, index what the compiler wrote, locate the failure.

Each collection gets a directory of its own under the case, `<state>/cases/<case_id>/debug/<stamp>/`:

    <stamp>/torch_compile_debug/run_*/torchinductor/<graph>/...   what TORCH_COMPILE_DEBUG wrote
    <stamp>/inductor_cache/...                                      Inductor's cache dir for this run only
    <stamp>/trace/, <stamp>/tlparse/                                TORCH_TRACE and tlparse (trace=True)
    <stamp>/index.json                                              the full, uncapped index

Nothing here depends on the layout of one torch version: the tree is walked, files are classified
by name patterns ("other" when nothing matches), and a directory holding output_code.py,
fx_graph_readable.py or the IR dumps is a compiled graph. Every file is a resource
`case://<case_id>/artifacts/<stamp>/<path>`.

The compile caches are disabled (TORCHINDUCTOR_FORCE_DISABLE_CACHES=1) and Inductor's cache dir
points into the collection: a cache hit would skip codegen and leave the graph directories empty,
and with the generated modules kept beside the artifacts a traceback frame in generated code can
be matched to the graph whose output_code.py it is.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pydantic import BaseModel, Field

from pt2_bug_basher.case.pages import PAGE_BYTES
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.domain.errors import NotFound
from pt2_bug_basher.domain.evidence import ArtifactsEvidence
from pt2_bug_basher.execution.runs import ProgressFn, RunResult, execute

if TYPE_CHECKING:
    from pt2_bug_basher.analysis.failure import Frame

DEBUG_DIR_NAME = "debug"
CACHE_DIR_NAME = "inductor_cache"
TRACE_DIR_NAME = "trace"
TLPARSE_DIR_NAME = "tlparse"
INDEX_NAME = "index.json"
TOOL = "collect_debug_artifacts"

MAX_WALK_FILES = 20_000
MAX_PARSE_BYTES = 32 * 1024 * 1024
FAILURE_TEXT_BYTES = 4 * 1024 * 1024
TLPARSE_TIMEOUT_S = 300.0

# Caps that keep a tool result within a few KB; index.json holds everything.
MAX_GRAPHS_SHOWN = 6
MAX_OPS_SHOWN = 10
MAX_INPUTS_SHOWN = 6
MAX_KERNELS_SHOWN = 8
MAX_FX_NODES_SHOWN = 12
MAX_FILES_SHOWN = 10
MAX_COMPILES_SHOWN = 8

# Variables this tool sets for the run; they override the caller's.
DEBUG_ENV = {
    "TORCH_COMPILE_DEBUG": "1",
    "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
}
# Variables of an earlier run that are not carried into the rerun: this tool decides them.
_NOT_CARRIED = {"TORCH_TRACE", "TORCH_LOGS", "TORCH_COMPILE_DEBUG", "TORCH_COMPILE_DEBUG_DIR",
                "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_FORCE_DISABLE_CACHES", "PYTHONUNBUFFERED",
                "PYTHONFAULTHANDLER"}

_BINARY_SUFFIXES = {".so", ".o", ".a", ".pyc", ".lock", ".gch", ".pch", ".bin", ".cubin", ".hsaco", ".pt", ".zip",
                    ".tar", ".gz", ".png", ".jpg", ".pkl", ".pickle"}


# -- models ---------------------------------------------------------------------------------------


class GraphInput(BaseModel):
    name: str
    annotation: str | None = Field(None, description='as printed, e.g. "f32[8, 8][8, 1]cpu"')
    dtype: str | None = None
    shape: str | None = None
    stride: str | None = None
    device: str | None = None


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


class ArtifactFile(BaseModel):
    uri: str
    kind: str
    bytes: int


class FailureLocation(BaseModel):
    exception_type: str | None = None
    message: str | None = Field(None, description="its first lines")
    signature: str | None = Field(None, description="the failure's signature (as run_with_logs computes it)")
    phase: str | None = Field(None, description="compile (Inductor compiling the graph) or runtime (running the "
                                                "generated code), where it can be told")
    graph: str | None = Field(None, description="the graph it happened in")
    kernel: str | None = Field(None, description="the generated kernel it happened in")
    fx_nodes: list[str] = Field(default_factory=list, description="post-grad FX nodes of that kernel")
    fx_nodes_from: str | None = None
    source_nodes: list[str] = Field(default_factory=list, description="pre-grad nodes (provenance tracking)")
    generated_frame: str | None = Field(None, description="the traceback frame in generated code")
    output_code: str | None = Field(None, description="resource URI of the page of output_code.py to read")
    output_code_line: int | None = None
    code_line: str | None = Field(None, description="the generated line at that place")
    compiler_error: str | None = Field(None, description="the C++/Triton compiler's first error")
    how: str = Field(description="how the location was told")


class CompileInfo(BaseModel):
    compile_id: str
    artifacts: int
    dynamo_graph: str | None = None


class TraceInfo(BaseModel):
    trace_log: str | None = None
    report: str | None = Field(None, description="tlparse's index.html (resource URI)")
    compile_directory: str | None = None
    compiles: list[CompileInfo] = Field(default_factory=list)
    compile_count: int = 0
    tlparse_run_id: str | None = None
    error: str | None = None


class CollectArtifactsResult(BaseModel):
    case_id: str
    run_id: str
    script: str
    command: list[str]
    env_added: dict[str, str]
    exit: str
    exit_code: int | None = None
    failed: bool
    duration_s: float
    debug_dir: str = Field(description="where the artifacts are on disk")
    index: str = Field(description="resource URI of the full, uncapped index (index.json)")
    graph_count: int
    graphs: list[GraphSummary] = Field(description="capped; the index has them all")
    kernel_count: int
    files_total: int
    nonempty_files: int = Field(0, description="files with content (the index itself not counted)")
    files_by_kind: dict[str, int]
    files: list[ArtifactFile] = Field(description="files outside the graph directories (capped)")
    failure: FailureLocation | None = None
    trace: TraceInfo | None = None
    stdout: str
    stderr: str
    recorded: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    next_step: str


# -- URIs and paths -------------------------------------------------------------------------------


def debug_root(store: Store, case_id: str) -> Path:
    return store.case_dir(case_id) / DEBUG_DIR_NAME


def new_debug_dir(store: Store, case_id: str) -> Path:
    path = debug_root(store, case_id) / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def artifact_uri(case_id: str, rel: str, page: int | None = None) -> str:
    uri = f"case://{case_id}/artifacts/{quote(rel, safe='/-._~')}"
    return f"{uri}?page={page}" if page and page > 1 else uri


def resolve_artifact(store: Store, case_id: str, rel: str) -> Path:
    """The file behind case://<case_id>/artifacts/<rel>; it must lie in the case's debug directory."""
    store.get_case(case_id)
    if not rel or "\x00" in rel:
        raise NotFound("name an artifact: case://<case_id>/artifacts/<path from the tool result>")
    root = debug_root(store, case_id).resolve()
    path = (root / rel).resolve()
    if not path.is_relative_to(root) or path == root:
        raise NotFound(f"artifact {rel!r} is outside the case's debug directory")
    if not path.is_file():
        raise NotFound(f"no artifact {rel!r} in case {case_id}; collect_debug_artifacts lists them "
                       "(and each collection's index.json)")
    return path


def page_of_line(path: Path, line: int) -> int:
    """The resource page (pages.read_page's byte pages) that holds a 1-based line."""
    try:
        with open(path, "rb") as fh:
            offset = 0
            for number, raw in enumerate(fh, start=1):
                if number >= line:
                    break
                offset += len(raw)
    except OSError:
        return 1
    return offset // PAGE_BYTES + 1


# -- classification and walking ---------------------------------------------------------------------

_GRAPH_FILES = ("output_code.py", "fx_graph_readable.py", "fx_graph_transformed.py", "ir_pre_fusion.txt",
                "ir_post_fusion.txt")
_ROLE_RE = re.compile(r"_(forward|backward|inference)_")
_AOT_ID_RE = re.compile(r"^# AOT ID: \['[^']*_(forward|backward|inference)'\]", re.M)

# Exact names first, then patterns on the file name; the first match wins.
_EXACT: dict[str, str] = {
    "fx_graph_readable.py": "fx_graph",
    "fx_graph_transformed.py": "fx_graph_transformed",
    "fx_graph_runnable.py": "fx_graph_runnable",
    "ir_pre_fusion.txt": "ir_pre_fusion",
    "ir_post_fusion.txt": "ir_post_fusion",
    "output_code.py": "output_code",
    "index.html": "tlparse_report",
    "compile_directory.json": "compile_directory",
    "failures_and_restarts.html": "tlparse_report",
    "chromium_events.json": "trace_events",
    "raw.jsonl": "trace_raw",
    "raw.log": "trace_raw",
    INDEX_NAME: "index",
}
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), k) for p, k in (
    (r"provenance", "provenance"),
    (r"^fx_graph_runnable", "fx_graph_runnable"),
    (r"^dynamo_output_graph", "dynamo_graph"),
    (r"^aot_joint_graph", "aot_joint_graph"),
    (r"^aot_forward_graph", "aot_forward_graph"),
    (r"^aot_backward_graph", "aot_backward_graph"),
    (r"^aot_inference_graph", "aot_inference_graph"),
    (r"^aot_.*graph", "aot_graph"),
    (r"^(before|after)_pre_grad_graph", "pre_grad_graph"),
    (r"^(before_post_grad_graph|inductor_post_grad_graph)", "post_grad_graph"),
    (r"^inductor_output_code", "output_code"),
    (r"guards", "guards"),
    (r"compilation_metrics", "compile_metrics"),
    (r"^dedicated_log_torch_trace.*\.log$", "trace_log"),
    (r"^aot_.*debug\.log$", "aot_debug_log"),
    (r"\.(svg|dot)$", "graph_diagram"),
    (r"\.(log)$", "log"),
))


def classify_file(rel: Path) -> str:
    """The kind of an artifact, from its name and place; "other" when nothing matches."""
    name = rel.name
    parts = rel.parts
    if CACHE_DIR_NAME in parts[:2]:
        return "inductor_cache"
    if name == "debug.log" and "torchdynamo" in parts:
        return "dynamo_debug_log"
    if name in _EXACT:
        return _EXACT[name]
    for pattern, kind in _PATTERNS:
        if pattern.search(name):
            return kind
    if "payloads" in parts:
        return "trace_payload"
    if re.search(r"config_\d+\.txt$", name):
        return "config"
    if parts and parts[0] == TRACE_DIR_NAME:
        return "trace_log"
    return "other"


@dataclass
class IndexedFile:
    rel: str
    kind: str
    size: int
    graph: str | None = None


@dataclass
class WalkResult:
    files: list[IndexedFile] = field(default_factory=list)
    graph_dirs: list[Path] = field(default_factory=list)
    cache_files: int = 0
    truncated: bool = False


def walk(debug_dir: Path) -> WalkResult:
    """Every text file under the collection (symlinks not followed), and the graph directories."""
    result = WalkResult()
    seen = 0
    for dirpath, dirnames, filenames in os.walk(debug_dir, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(debug_dir)
        dirnames.sort()
        if rel_dir.parts[:1] == (CACHE_DIR_NAME,):
            result.cache_files += sum(1 for f in filenames if Path(f).suffix not in _BINARY_SUFFIXES)
            continue
        is_graph = any(name in filenames for name in _GRAPH_FILES)
        if is_graph and here != debug_dir:
            result.graph_dirs.append(here)
        for name in sorted(filenames):
            seen += 1
            if seen > MAX_WALK_FILES:
                result.truncated = True
                return result
            path = here / name
            if path.is_symlink() or path.suffix in _BINARY_SUFFIXES:
                continue
            try:
                size = path.stat().st_size
            except OSError:
                continue
            rel = rel_dir / name
            result.files.append(IndexedFile(rel.as_posix(), classify_file(rel), size,
                                            here.name if is_graph and here != debug_dir else None))
    return result


def _graph_sort_key(path: Path) -> tuple[int, float, str]:
    tail = re.search(r"\.(\d+)$", path.name)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = 0.0
    return (int(tail.group(1)) if tail else 1 << 30, mtime, path.name)


# -- FX graph printouts -----------------------------------------------------------------------------

_DEF_RE = re.compile(r"^(\s*)def forward\(self,?\s*(.*)\):\s*$")
_ARG_RE = re.compile(r'(\w+)\s*(?::\s*"([^"]*)")?')
_NODE_RE = re.compile(r'^\s+(\w+)(?:\s*:\s*"[^"]*")?\s*=\s*(.+)$')
_ANNOT_RE = re.compile(
    r"^(?P<dtype>[a-z]+\d*)(?P<shape>\[[^\]]*\])(?P<stride>\[[^\]]*\])?(?P<device>[a-z]+(?::\d+)?)?$")
_BINOPS = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod", "**": "pow",
           "@": "matmul", "&": "and_", "|": "or_", "^": "xor", "<": "lt", ">": "gt", "<=": "le", ">=": "ge",
           "==": "eq", "!=": "ne"}
_BINOP_RE = re.compile(r"^\w+ (\*\*|//|<=|>=|==|!=|[-+*/%@&|^<>]) \S+$")


@dataclass
class FxGraphStats:
    node_count: int
    ops: Counter[str]
    inputs: list[GraphInput]
    subgraphs: int
    node_names: list[str]


def parse_annotation(annotation: str | None) -> dict[str, str | None]:
    if not annotation:
        return {}
    match = _ANNOT_RE.match(annotation.replace(" ", ""))
    if not match:
        return {}
    shape = match.group("shape")
    stride = match.group("stride")
    return {
        "dtype": match.group("dtype"),
        "shape": shape.replace(",", ", ") if shape else None,
        "stride": stride.replace(",", ", ") if stride else None,
        "device": match.group("device"),
    }


def _op_of(rhs: str, local_names: set[str]) -> str:
    rhs = rhs.split(";  ", 1)[0].strip()
    if rhs.startswith("torch.ops."):
        return rhs[len("torch.ops."):].split("(", 1)[0]
    call = re.match(r"^([\w.]+)\(", rhs)
    if call:
        target = call.group(1)
        head = target.split(".", 1)[0]
        if "." in target and head in local_names:
            return "Tensor." + target.rsplit(".", 1)[1]
        return target
    if re.match(r"^\w+\[", rhs):
        return "getitem"
    if rhs.startswith("self."):
        return "get_attr"
    binop = _BINOP_RE.match(rhs)
    if binop:
        return "operator." + _BINOPS.get(binop.group(1), binop.group(1))
    return "other"


def parse_fx_graph(text: str) -> FxGraphStats | None:
    """Node count, op counts and inputs of the top-level forward of an FX graph printout."""
    lines = text.splitlines()
    start = None
    indent = ""
    for number, line in enumerate(lines):
        match = _DEF_RE.match(line)
        if match:
            start, indent = number, match.group(1)
            break
    if start is None:
        return None
    signature = _DEF_RE.match(lines[start]).group(2)  # type: ignore[union-attr]
    inputs = []
    for arg in _ARG_RE.finditer(signature):
        annotation = arg.group(2)
        inputs.append(GraphInput(name=arg.group(1), annotation=annotation, **parse_annotation(annotation)))
    body_indent = len(indent) + 4
    ops: Counter[str] = Counter()
    names = [i.name for i in inputs]
    local = set(names)
    saw_output = False
    subgraphs = sum(1 for line in lines if re.match(r"^\s+class \w+\(", line))
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if width < body_indent:
            break
        if width > body_indent or line.lstrip().startswith("#"):
            continue
        stripped = line.strip()
        if stripped.startswith("return"):
            saw_output = True
            continue
        node = _NODE_RE.match(line)
        if node is None:
            continue
        name, rhs = node.group(1), node.group(2)
        if rhs.strip() in local and rhs.strip() != name:
            # `l_x_ = L_x_`: Dynamo's local alias of an input, not a node.
            local.add(name)
            continue
        ops[_op_of(rhs, local)] += 1
        local.add(name)
        names.append(name)
    node_count = len(inputs) + sum(ops.values()) + (1 if saw_output else 0)
    return FxGraphStats(node_count, ops, inputs, subgraphs, names)


# -- generated code ---------------------------------------------------------------------------------

_KERNEL_DEF_RE = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.M)
_EXTERN_RE = re.compile(r"\bextern_kernels\.(\w+)\(")
_SOURCE_NODES_RE = re.compile(r"#\s*(?:Topologically Sorted )?Source Nodes: \[([^\]]*)\]")
_PROVENANCE_HANDLE_RE = re.compile(r"#\s*\[Provenance debug handles\]\s*(\S+)")


def kernel_kind(name: str, method: str) -> str:
    for prefix, kind in (("cpp_", "cpp"), ("triton_poi_", "triton pointwise"), ("triton_red_", "triton reduction"),
                         ("triton_per_", "triton persistent reduction"), ("triton_tem_", "triton template"),
                         ("triton_", "triton")):
        if name.startswith(prefix):
            return kind
    return method


@dataclass
class Kernel:
    name: str
    kind: str
    start: int  # 1-based line of the definition
    end: int  # last line of its source
    body: str
    call_lines: list[int] = field(default_factory=list)
    handle: str | None = None
    source_nodes: list[str] = field(default_factory=list)


@dataclass
class OutputCode:
    lines: list[str]
    kernels: list[Kernel]
    extern_calls: Counter[str]

    def kernel_named(self, name: str) -> Kernel | None:
        return next((k for k in self.kernels if k.name == name), None)

    def kernel_at(self, line: int) -> Kernel | None:
        return next((k for k in self.kernels if k.start <= line <= k.end), None)

    def kernel_called_at(self, line: int) -> Kernel | None:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        for called in re.findall(r"\b(\w+)(?:\.run)?\(", text):
            kernel = self.kernel_named(called)
            if kernel is not None:
                return kernel
        return None


def parse_output_code(text: str) -> OutputCode:
    lines = text.splitlines()
    kernels: list[Kernel] = []
    for match in _KERNEL_DEF_RE.finditer(text):
        start = text.count("\n", 0, match.start()) + 1
        end = start
        for number in range(start, len(lines)):
            if lines[number].startswith("'''"):
                end = number + 1
                break
        else:
            end = start
        name = match.group(1)
        kernels.append(Kernel(name, kernel_kind(name, match.group(2)), start, end, "\n".join(lines[start - 1:end])))
    names = {k.name: k for k in kernels}
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        call = re.match(r"^(\w+)(?:\.run)?\(", stripped)
        if call and call.group(1) in names and not _KERNEL_DEF_RE.match(line):
            kernel = names[call.group(1)]
            kernel.call_lines.append(number)
            # The comments just above a call say which FX nodes it computes.
            for back in range(number - 2, max(-1, number - 6), -1):
                previous = lines[back].strip()
                if not previous.startswith("#"):
                    break
                handle = _PROVENANCE_HANDLE_RE.search(previous)
                if handle:
                    kernel.handle = kernel.handle or handle.group(1)
                nodes = _SOURCE_NODES_RE.search(previous)
                if nodes and not kernel.source_nodes:
                    kernel.source_nodes = [n.strip() for n in nodes.group(1).split(",") if n.strip()]
    for kernel in kernels:
        if kernel.source_nodes:
            continue
        # Triton kernels carry the comment just above their definition (or in their source).
        above = []
        for back in range(kernel.start - 2, max(-1, kernel.start - 40), -1):
            if not lines[back].startswith("#"):
                break
            above.append(lines[back])
        for text_block in ("\n".join(reversed(above)), kernel.body):
            nodes = _SOURCE_NODES_RE.search(text_block)
            if nodes:
                kernel.source_nodes = [n.strip() for n in nodes.group(1).split(",") if n.strip()]
                break
    externs = Counter(_EXTERN_RE.findall(text))
    return OutputCode(lines, kernels, externs)


# -- graphs ---------------------------------------------------------------------------------------


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


def _read_text(path: Path, limit: int = MAX_PARSE_BYTES) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return None


_DEBUG_TRACE_RE = re.compile(r"\[(\d+/\d+(?:_\d+)?)\]\s+\S+ debug trace: (\S+)\s*$", re.M)


def compile_ids_from_stderr(text: str) -> dict[str, str]:
    """Inductor logs `[0/0] model__0_forward_1 debug trace: <dir>` as each graph's compile ends."""
    return {Path(path).name: f"[{cid}]" for cid, path in _DEBUG_TRACE_RE.findall(text)}


def load_graph(path: Path, debug_dir: Path, compile_ids: dict[str, str]) -> Graph:
    files = sorted(p.name for p in path.iterdir() if p.is_file() and p.suffix not in _BINARY_SUFFIXES)
    role_match = _ROLE_RE.search(path.name)
    code_text = _read_text(path / "output_code.py") if "output_code.py" in files else None
    role = role_match.group(1) if role_match else None
    if role is None and code_text:
        aot = _AOT_ID_RE.search(code_text)
        role = aot.group(1) if aot else None
    fx_text = _read_text(path / "fx_graph_readable.py") if "fx_graph_readable.py" in files else None
    after_text = _read_text(path / "fx_graph_transformed.py") if "fx_graph_transformed.py" in files else None
    provenance: dict[str, Any] = {}
    for name in files:
        if "provenance" in name and name.endswith(".json"):
            try:
                loaded = json.loads(_read_text(path / name) or "{}")
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


# -- failures ---------------------------------------------------------------------------------------

_COMPILER_ERROR_RE = re.compile(
    r"^(\S+?\.(?:cpp|cc|cxx|cu|c|h|hpp)):(\d+):(?:(\d+):)?\s*(?:fatal )?error:\s*(.+)$", re.M)
_ECHO_RE = re.compile(r"^\s*(\d+)\s+\|\s?(.*)$")
_GENERATED_NAME_RE = re.compile(r"^c[a-z0-9]{30,}\.py$")
_COMPILE_EXC = ("BackendCompilerFailed", "InductorError", "CppCompileError", "CompilationError", "LoweringException")


def _exception_of(
    text: str, exit_code: int | None, signal_name: str | None,
) -> tuple[str | None, str | None, str | None]:
    """Exception type, message and signature, as run_with_logs computes them."""
    from pt2_bug_basher.analysis.failure import parse_failure

    record = parse_failure(text, exit_code=exit_code, signal_name=signal_name)
    if record is None:
        return (None, f"killed by {signal_name}", None) if signal_name else (None, None, None)
    return record.exception_type, record.message, record.signature


def _first_lines(message: str | None, lines: int = 3, chars: int = 400) -> str | None:
    if not message:
        return None
    kept = [line.rstrip() for line in message.strip().splitlines() if line.strip()][:lines]
    return "\n".join(kept)[:chars] or None


_INDUCTOR_GRAPH_FUNCTIONS = {"compile_fx_inner", "_compile_fx_inner", "fx_codegen_and_compile",
                              "codegen_and_compile", "compile_to_module", "_compile_to_module", "codegen"}
_INDUCTOR_GRAPH_FILES = ("torch/_inductor/graph.py", "torch/_inductor/scheduler.py", "torch/_inductor/lowering.py",
                         "torch/_inductor/ir.py", "torch/_inductor/codegen/", "torch/_inductor/codecache.py")


def _in_inductor_graph_compile(frame: Frame) -> bool:
    """A frame inside Inductor's compile of one graph (not Dynamo's or AOTAutograd's part of the compile)."""
    path = frame.file.replace("\\", "/")
    if "torch/_inductor/compile_fx.py" in path:
        return frame.function in _INDUCTOR_GRAPH_FUNCTIONS
    return any(part in path for part in _INDUCTOR_GRAPH_FILES)


def _is_generated(frame: Frame, debug_dir: Path) -> bool:
    path = frame.file
    return (
        path.startswith(str(debug_dir / CACHE_DIR_NAME))
        or "torchinductor_" in path
        or bool(_GENERATED_NAME_RE.match(Path(path).name))
        or path.endswith("output_code.py")
    )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def _graph_of_frame(frame: Frame, graphs: list[Graph]) -> tuple[Graph | None, str, bool]:
    """The graph a generated-code frame belongs to, how that was told, and whether the frame's file is
    that graph's output_code.py (so its line numbers are output_code.py's)."""
    with_code = [g for g in graphs if g.code is not None]
    generated = Path(frame.file)
    if generated.is_file():
        for graph in with_code:
            if _same_file(generated, graph.output_code_path()):
                return graph, "the frame's module is this graph's output_code.py", True
    if frame.code:
        matches = [g for g in with_code if 0 < frame.line <= len(g.code.lines)  # type: ignore[union-attr]
                   and g.code.lines[frame.line - 1].strip() == frame.code]  # type: ignore[union-attr]
        if len(matches) == 1:
            return matches[0], "the frame's line matches this graph's output_code.py", True
    # A kernel in a module of its own (Triton): the frame's function is the kernel.
    owners = [g for g in with_code if g.code.kernel_named(frame.function)]  # type: ignore[union-attr]
    if owners:
        return owners[-1], f"the frame is in kernel {frame.function}, generated for this graph", False
    return None, "", False


@dataclass
class CompilerError:
    file: str
    line: int
    message: str
    code: str | None


def parse_compiler_errors(text: str) -> list[CompilerError]:
    errors: list[CompilerError] = []
    lines = text.splitlines()
    for match in _COMPILER_ERROR_RE.finditer(text):
        start_line = text.count("\n", 0, match.start())
        code = None
        for following in lines[start_line + 1:start_line + 3]:
            echo = _ECHO_RE.match(following)
            if echo and echo.group(1) == match.group(2):
                code = echo.group(2).strip()
                break
        errors.append(CompilerError(match.group(1), int(match.group(2)), match.group(4).strip(), code))
    return errors


def _line_in_kernel(kernel: Kernel, wanted: str | None) -> int | None:
    if not wanted:
        return None
    for offset, line in enumerate(kernel.body.splitlines()):
        if line.strip() == wanted:
            return kernel.start + offset
    return None


def _kernel_of_compiler_error(error: CompilerError, graphs: list[Graph]) -> tuple[Graph, Kernel, int | None] | None:
    """The kernel whose source the compiler rejected, and the rejected line's number in output_code.py."""
    wanted = None
    source = Path(error.file)
    text = _read_text(source) if source.is_file() else None
    if text is not None:
        lines = text.splitlines()
        if 0 < error.line <= len(lines):
            wanted = lines[error.line - 1].strip()
        # A kernel's source compiled on its own: the file holds the kernel's whole body.
        for graph in reversed(graphs):
            for kernel in graph.code.kernels if graph.code else []:
                inner = kernel.body.split("'''", 1)[-1].rsplit("'''", 1)[0].strip()
                if inner and inner in text:
                    return graph, kernel, _line_in_kernel(kernel, wanted)
    wanted = wanted or error.code
    if not wanted or len(wanted) < 4:
        return None
    for graph in reversed(graphs):
        for kernel in graph.code.kernels if graph.code else []:
            line = _line_in_kernel(kernel, wanted)
            if line is not None:
                return graph, kernel, line
    return None


def locate_failure(
    text: str, graphs: list[Graph], debug_dir: Path, case_id: str, stamp: str,
    exit_code: int | None, signal_name: str | None,
) -> FailureLocation:
    exc_type, message, signature = _exception_of(text, exit_code, signal_name)
    location = FailureLocation(exception_type=exc_type, message=_first_lines(message), signature=signature, how="")
    from pt2_bug_basher.analysis.failure import parse as parse_traceback

    frames = parse_traceback(text, exit_code, signal_name).all_frames()
    generated = [f for f in frames if _is_generated(f, debug_dir)]
    in_inductor = any(_in_inductor_graph_compile(f) for f in frames)
    in_compile = in_inductor or any(name in (exc_type or "") + (message or "") for name in _COMPILE_EXC)
    errors = parse_compiler_errors(text)
    if errors:
        location.compiler_error = f"{Path(errors[0].file).name}:{errors[0].line}: error: {errors[0].message}"[:300]
    graph: Graph | None = None
    kernel: Kernel | None = None
    line: int | None = None
    hows: list[str] = []
    frame = generated[-1] if generated else None
    if frame is not None:
        location.generated_frame = f"{frame.file}:{frame.line} in {frame.function}"
        graph, how, same_module = _graph_of_frame(frame, graphs)
        if graph is not None:
            hows.append(how)
            code = graph.code
            assert code is not None
            if same_module:
                line = frame.line
                kernel = (code.kernel_named(frame.function) or code.kernel_at(frame.line)
                          or code.kernel_called_at(frame.line))
                if kernel is not None:
                    verb = "is in" if code.kernel_at(frame.line) else "calls"
                    hows.append(f"line {frame.line} {verb} {kernel.name}")
            else:
                kernel = code.kernel_named(frame.function)
                line = kernel.start if kernel else None
            location.phase = "compile" if (in_compile and frame.function == "<module>") else "runtime"
    if kernel is None and errors:
        owner = None
        for error in errors:
            owner = (_kernel_of_compiler_error(error, [graph]) if graph else None) \
                or _kernel_of_compiler_error(error, graphs)
            if owner:
                break
        if owner is not None:
            graph, kernel, error_line = owner
            line = error_line or kernel.start
            location.phase = "compile"
            hows.append(f"the compiler rejected {kernel.name}" + (f" at output_code.py line {error_line}"
                                                                   if error_line else ""))
    if graph is None and in_inductor and graphs:
        # No frame in generated code, but the traceback is inside Inductor's compile of one graph: the
        # graph it was compiling is the last one it started, the one left without output_code.py.
        incomplete = [g for g in graphs if g.code is None]
        graph = (incomplete or graphs)[-1]
        location.phase = "compile"
        hows.append("the traceback is in Inductor's compile of a graph and this is the last graph it started"
                    + (" (it has no output_code.py)" if graph.code is None
                       else " (every graph has output_code.py, so this is a guess)"))
    if graph is not None:
        location.graph = graph.name
    if kernel is not None and graph is not None:
        location.kernel = kernel.name
        nodes, source, pre = graph.kernel_nodes(kernel)
        location.fx_nodes, location.fx_nodes_from, location.source_nodes = nodes[:20], source, pre[:20]
    if graph is not None and graph.code is not None:
        line = line or (kernel.start if kernel else None)
        page = page_of_line(graph.output_code_path(), line) if line else 1
        location.output_code = artifact_uri(case_id, f"{stamp}/{graph.rel}/output_code.py", page)
        location.output_code_line = line
        if line and 0 < line <= len(graph.code.lines):
            location.code_line = graph.code.lines[line - 1].strip()[:300]
    if location.phase is None and in_compile:
        location.phase = "compile"
    if not hows:
        hows.append("no frame in generated code and no compiler error: the failure is not in a kernel "
                    "Inductor generated (it may be in Dynamo, AOTAutograd or the user code)")
    location.how = "; ".join(hows)
    return location


# -- tlparse ----------------------------------------------------------------------------------------


async def run_tlparse(store: Store, case: CaseRecord, debug_dir: Path, stamp: str,
                      progress: ProgressFn | None) -> TraceInfo:
    from pt2_bug_basher.execution.tlparse import newest_trace_log, tlparse_binary

    log = newest_trace_log(debug_dir / TRACE_DIR_NAME)
    if log is None:
        return TraceInfo(error="no trace log was written: did the script reach torch.compile?")
    info = TraceInfo(trace_log=artifact_uri(case.case_id, f"{stamp}/{log.relative_to(debug_dir).as_posix()}"))
    binary = tlparse_binary(case.python)
    if binary is None:
        info.error = "tlparse is not installed (pip install tlparse); the raw trace log is indexed"
        return info
    out = debug_dir / TLPARSE_DIR_NAME
    # tlparse 0.4.3 refuses a directory and --latest: it gets the log file itself; -p writes plain text.
    result = await execute(store, case, [binary, str(log), "-o", str(out), "--overwrite", "--no-browser", "-p"],
                           tool=TOOL, cwd=debug_dir, timeout_s=TLPARSE_TIMEOUT_S, progress=progress, label="tlparse")
    info.tlparse_run_id = result.run_id
    if result.outcome.exit_code != 0:
        info.error = f"tlparse failed ({result.outcome.describe_exit()}): {result.stderr_text(4000).strip()[-400:]}"
        return info
    if (out / "index.html").is_file():
        info.report = artifact_uri(case.case_id, f"{stamp}/{TLPARSE_DIR_NAME}/index.html")
    directory = out / "compile_directory.json"
    if directory.is_file():
        info.compile_directory = artifact_uri(case.case_id, f"{stamp}/{TLPARSE_DIR_NAME}/compile_directory.json")
        try:
            data = json.loads(directory.read_text(errors="replace"))
        except (OSError, ValueError):
            data = {}
        compiles = []
        for compile_id, entry in data.items() if isinstance(data, dict) else []:
            if compile_id == "[-/-]" or not isinstance(entry, dict):
                continue
            artifacts = [a for a in entry.get("artifacts", []) if isinstance(a, dict)]
            dynamo = next((a.get("url") for a in artifacts if str(a.get("name", "")).startswith("dynamo_output_graph")),
                          None)
            compiles.append(CompileInfo(
                compile_id=str(compile_id), artifacts=len(artifacts),
                dynamo_graph=artifact_uri(case.case_id, f"{stamp}/{TLPARSE_DIR_NAME}/{dynamo}") if dynamo else None,
            ))
        info.compile_count = len(compiles)
        info.compiles = compiles[:MAX_COMPILES_SHOWN]
    return info


def tlparse_related(debug_dir: Path, case_id: str, stamp: str, compile_id: str, role: str) -> dict[str, str]:
    """tlparse's Dynamo graph and the AOT graph of this role for one compile id ("[0/0]"), as resource URIs.
    (index.json and compile_directory.json list the others: joint, pre- and post-grad graphs.)"""
    wanted = {"dynamo_graph", f"aot_{role}_graph"}
    directory = debug_dir / TLPARSE_DIR_NAME / "compile_directory.json"
    try:
        data = json.loads(directory.read_text(errors="replace"))
    except (OSError, ValueError):
        return {}
    entry = data.get(compile_id) if isinstance(data, dict) else None
    related: dict[str, str] = {}
    for artifact in (entry or {}).get("artifacts", []):
        name, url = str(artifact.get("name", "")), artifact.get("url")
        kind = classify_file(Path(name))
        if url and kind in wanted and kind not in related:
            related[kind] = artifact_uri(case_id, f"{stamp}/{TLPARSE_DIR_NAME}/{url}")
    return related


# -- the whole collection ---------------------------------------------------------------------------


@dataclass
class Target:
    """What to rerun: an argv for the case's interpreter, its working directory, the env to carry."""

    argv: list[str]
    cwd: Path
    script: str
    env: dict[str, str] = field(default_factory=dict)
    source: str = ""


def carried_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in _NOT_CARRIED}


_FILE_PRIORITY = ("tlparse_report", "dynamo_debug_log", "aot_debug_log", "trace_log", "compile_directory",
                  "graph_diagram", "log", "other", "index")


def _listed_files(files: Iterable[IndexedFile], case_id: str, stamp: str) -> list[ArtifactFile]:
    loose = [f for f in files if f.graph is None and not f.rel.startswith(f"{TLPARSE_DIR_NAME}/")]
    rank = {kind: n for n, kind in enumerate(_FILE_PRIORITY)}
    loose.sort(key=lambda f: (f.size == 0, rank.get(f.kind, len(rank)), f.rel))
    return [ArtifactFile(uri=artifact_uri(case_id, f"{stamp}/{f.rel}"), kind=f.kind, bytes=f.size)
            for f in loose[:MAX_FILES_SHOWN]]


async def collect(
    store: Store,
    case: CaseRecord,
    target: Target,
    *,
    trace: bool,
    env_add: dict[str, str],
    timeout_s: float,
    progress: ProgressFn | None,
) -> CollectArtifactsResult:
    debug_dir = new_debug_dir(store, case.case_id)
    stamp = debug_dir.name
    ours = {**DEBUG_ENV, "TORCH_COMPILE_DEBUG_DIR": str(debug_dir),
            "TORCHINDUCTOR_CACHE_DIR": str(debug_dir / CACHE_DIR_NAME)}
    if trace:
        (debug_dir / TRACE_DIR_NAME).mkdir()
        ours["TORCH_TRACE"] = str(debug_dir / TRACE_DIR_NAME)
    run_env = {**target.env, **env_add, **ours}
    result: RunResult = await execute(store, case, target.argv, tool=TOOL, cwd=target.cwd, env_add=run_env,
                                      timeout_s=timeout_s, progress=progress,
                                      label=f"{Path(target.script).name} with TORCH_COMPILE_DEBUG")
    outcome = result.outcome
    stderr = result.stderr_text(FAILURE_TEXT_BYTES)
    trace_info = await run_tlparse(store, case, debug_dir, stamp, progress) if trace else None

    walked = walk(debug_dir)
    compile_ids = compile_ids_from_stderr(stderr)
    graphs = [load_graph(p, debug_dir, compile_ids) for p in sorted(walked.graph_dirs, key=_graph_sort_key)]
    summaries = [summarise_graph(g, case.case_id, stamp) for g in graphs]
    if trace_info is not None:
        for summary in summaries:
            if summary.compile_id:
                summary.related = tlparse_related(debug_dir, case.case_id, stamp, summary.compile_id, summary.role)
    failed = outcome.exit_code != 0 or outcome.timed_out or outcome.signal_name is not None
    failure = None
    if failed:
        text = stderr if stderr.strip() else result.stdout_text(FAILURE_TEXT_BYTES)
        failure = locate_failure(text, graphs, debug_dir, case.case_id, stamp, outcome.exit_code, outcome.signal_name)

    by_kind = Counter(f.kind for f in walked.files)
    if walked.cache_files:
        by_kind["inductor_cache"] = walked.cache_files
    kernel_total = sum(len(g.code.kernels) for g in graphs if g.code)
    notes: list[str] = []
    if walked.truncated:
        notes.append(f"the debug directory holds more than {MAX_WALK_FILES} files; the index stops there")
    if len(summaries) > MAX_GRAPHS_SHOWN:
        notes.append(f"{len(summaries)} graphs: the first {MAX_GRAPHS_SHOWN} are shown, index.json lists all")
    if not trace:
        notes.append("trace=True adds TORCH_TRACE and tlparse: Dynamo's graph, the AOT joint/forward/backward "
                     "graphs and the pre/post-grad graphs of each compile")
    if outcome.timed_out:
        notes.append(f"the run was killed after the timeout ({timeout_s:.0f}s); what was written until then is indexed")
    if walked.cache_files:
        notes.append(f"{walked.cache_files} files of Inductor's cache for this run (generated modules, C++ sources) "
                     f"are under {debug_dir / CACHE_DIR_NAME}, not listed")

    index_uri = artifact_uri(case.case_id, f"{stamp}/{INDEX_NAME}")
    collected = CollectArtifactsResult(
        case_id=case.case_id, run_id=result.run_id, script=target.script, command=target.argv,
        env_added={k: v for k, v in result.env_add.items() if k not in ("PYTHONUNBUFFERED", "PYTHONFAULTHANDLER")},
        exit=outcome.describe_exit(), exit_code=outcome.exit_code, failed=failed,
        duration_s=round(outcome.duration_s, 2), debug_dir=str(debug_dir), index=index_uri,
        graph_count=len(summaries), graphs=summaries[:MAX_GRAPHS_SHOWN], kernel_count=kernel_total,
        files_total=len(walked.files) + 1, nonempty_files=sum(1 for f in walked.files if f.size > 0),
        files_by_kind=dict(sorted(by_kind.items())),
        files=_listed_files(walked.files, case.case_id, stamp), failure=failure, trace=trace_info,
        stdout=f"case://{case.case_id}/runs/{result.run_id}/stdout",
        stderr=f"case://{case.case_id}/runs/{result.run_id}/stderr", notes=notes, next_step="",
    )
    collected.files_by_kind["index"] = collected.files_by_kind.get("index", 0) + 1
    _write_index(debug_dir, case.case_id, stamp, collected, graphs, walked)
    store.set_run_result(result.run_id, {
        "debug_dir": str(debug_dir), "graphs": len(graphs), "kernels": kernel_total, "failed": failed,
        "failure_graph": failure.graph if failure else None, "failure_kernel": failure.kernel if failure else None,
    })
    return collected


def _write_index(debug_dir: Path, case_id: str, stamp: str, result: CollectArtifactsResult, graphs: list[Graph],
                 walked: WalkResult) -> None:
    full = {
        "case_id": case_id, "run_id": result.run_id, "command": result.command, "env_added": result.env_added,
        "exit": result.exit, "debug_dir": str(debug_dir),
        "graphs": [summarise_graph(g, case_id, stamp, capped=False).model_dump() for g in graphs],
        "files": [{"uri": artifact_uri(case_id, f"{stamp}/{f.rel}"), "kind": f.kind, "bytes": f.size,
                   "graph": f.graph} for f in walked.files],
        "failure": result.failure.model_dump() if result.failure else None,
        "trace": result.trace.model_dump() if result.trace else None,
    }
    for graph, entry in zip(graphs, full["graphs"]):
        entry["related"] = next((s.related for s in result.graphs if s.name == graph.name), {})
    (debug_dir / INDEX_NAME).write_text(json.dumps(full, indent=1))


def evidence_summary(result: CollectArtifactsResult) -> tuple[bool, str, ArtifactsEvidence]:
    ok = result.graph_count > 0 or result.nonempty_files > 0
    where = ""
    if result.failure and (result.failure.graph or result.failure.kernel):
        where = f"; failure in graph {result.failure.graph}" + (
            f", kernel {result.failure.kernel}" if result.failure.kernel else "")
    summary = (f"TORCH_COMPILE_DEBUG: {result.graph_count} graphs, {result.kernel_count} kernels, "
               f"{result.files_total} files ({result.exit}){where}")
    if not ok:
        summary = f"TORCH_COMPILE_DEBUG wrote no artifacts ({result.exit})"
    data = ArtifactsEvidence(
        debug_dir=result.debug_dir, index=result.index, run_id=result.run_id, script=result.script,
        graphs=result.graph_count, kernels=result.kernel_count, files=result.files_total, failed=result.failed,
        failure_graph=result.failure.graph if result.failure else None,
        failure_kernel=result.failure.kernel if result.failure else None,
    )
    return ok, summary[:500], data

