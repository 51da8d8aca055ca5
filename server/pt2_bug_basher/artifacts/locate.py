"""Where a failure happened: the graph, the generated kernel and line, the FX nodes that kernel computes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.failure import mismatched_item
from pt2_bug_basher.analysis.output_code import Kernel
from pt2_bug_basher.artifacts.accuracy import NAMED_ITEM, OutputKernel, output_kernels
from pt2_bug_basher.artifacts.graphs import Graph
from pt2_bug_basher.artifacts.index import CACHE_DIR_NAME, artifact_uri, page_of_line, read_text

if TYPE_CHECKING:
    from pt2_bug_basher.analysis.failure import Frame


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
    accuracy: bool = Field(False, description="a wrong result (not an exception in compiled code)")
    mismatched_output: int | None = Field(None, description="the item of the compared result that differs, as "
                                                            "the assertion names it; with one forward graph, "
                                                            "the graph output of that index")
    output_kernels: list[OutputKernel] = Field(
        default_factory=list, description="accuracy: the calls that write the graph output(s) that came out wrong, "
                                          "then those that write what they read; the ops and code of each")
    localized: str | None = Field(None, description="the layer localize put the failure in, when it ran")
    how: str = Field(description="how the location was told")


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
    text = read_text(source) if source.is_file() else None
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


_LAYER_SAYS = {
    "Inductor": "localize put the failure in Inductor (only backend='inductor' fails)",
}


def _localized(layer: str | None) -> str:
    if layer is None:
        return ""
    return _LAYER_SAYS.get(layer, f"localize put the failure in {layer} (a backend before Inductor already fails)")


def locate_failure(
    text: str, graphs: list[Graph], debug_dir: Path, case_id: str, stamp: str,
    exit_code: int | None, signal_name: str | None, *, accuracy: bool = False, layer: str | None = None,
) -> FailureLocation:
    """Where the failure is: the graph, kernel and line a traceback or compiler error points at; for a wrong
    result, the kernels that write the output that differs. `layer`: what localize found, if it ran."""
    exc_type, message, signature = _exception_of(text, exit_code, signal_name)
    location = FailureLocation(exception_type=exc_type, message=_first_lines(message), signature=signature,
                               accuracy=accuracy, localized=layer, how="")
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
        graph, kernel, line = _generated_frame_location(location, frame, graphs, in_compile, hows)
    if kernel is None and errors:
        owner = _compiler_error_owner(errors, graph, graphs)
        if owner is not None:
            graph, kernel, error_line = owner
            line = error_line or kernel.start
            location.phase = "compile"
            hows.append(f"the compiler rejected {kernel.name}" + (f" at output_code.py line {error_line}"
                                                                   if error_line else ""))
    if graph is None and in_inductor and graphs:
        graph = _last_started_graph(location, graphs, hows)
    if graph is None and kernel is None and accuracy:
        graph, kernel, line = _accuracy_location(location, text, graphs, case_id, stamp, layer, hows)
    _point_at(location, graph, kernel, line, case_id, stamp)
    if location.phase is None and in_compile:
        location.phase = "compile"
    if not hows:
        hows.append(_nowhere(accuracy, layer))
    location.how = "; ".join(hows)
    return location


def _generated_frame_location(location: FailureLocation, frame: Frame, graphs: list[Graph], in_compile: bool,
                              hows: list[str]) -> tuple[Graph | None, Kernel | None, int | None]:
    """The graph, kernel and line of the innermost frame in generated code (the phase it shows, how it was found)."""
    location.generated_frame = f"{frame.file}:{frame.line} in {frame.function}"
    kernel: Kernel | None = None
    line: int | None = None
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
    return graph, kernel, line


def _compiler_error_owner(errors: list[CompilerError], graph: Graph | None, graphs: list[Graph]
                          ) -> tuple[Graph, Kernel, int | None] | None:
    """The kernel the first placeable compiler error is in (in `graph` first, when one is known)."""
    owner = None
    for error in errors:
        owner = (_kernel_of_compiler_error(error, [graph]) if graph else None) \
            or _kernel_of_compiler_error(error, graphs)
        if owner:
            break
    return owner


def _last_started_graph(location: FailureLocation, graphs: list[Graph], hows: list[str]) -> Graph:
    """No frame in generated code, but the traceback is inside Inductor's compile of one graph: the graph it
    was compiling is the last one it started, the one left without output_code.py."""
    incomplete = [g for g in graphs if g.code is None]
    graph = (incomplete or graphs)[-1]
    location.phase = "compile"
    hows.append("the traceback is in Inductor's compile of a graph and this is the last graph it started"
                + (" (it has no output_code.py)" if graph.code is None
                   else " (every graph has output_code.py, so this is a guess)"))
    return graph


def _point_at(location: FailureLocation, graph: Graph | None, kernel: Kernel | None, line: int | None,
              case_id: str, stamp: str) -> None:
    """The graph, the kernel with its FX nodes, and the output_code.py line the location names."""
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


def _nowhere(accuracy: bool, layer: str | None) -> str:
    """How to read a failure with no frame in generated code, no compiler error and no kernel found."""
    if layer == "Inductor":
        return (f"no frame in generated code and no compiler error, but {_localized(layer)}: the bug is in "
                "Inductor's lowering, scheduling or codegen of these graphs; read their output_code.py and IR")
    if layer is not None:
        return f"no frame in generated code and no compiler error; {_localized(layer)}"
    if accuracy:
        return ("a wrong result, but no call in the generated wrappers writes a graph output (nothing was "
                "generated, or the outputs alias the inputs); localize tells which layer computes it wrong")
    return ("no frame in generated code and no compiler error: the failure is not in a kernel Inductor "
            "generated (it may be in Dynamo, AOTAutograd or the user code; localize tells which)")


def _accuracy_location(
    location: FailureLocation, text: str, graphs: list[Graph], case_id: str, stamp: str, layer: str | None,
    hows: list[str],
) -> tuple[Graph | None, Kernel | None, int | None]:
    """A wrong result: the kernels that write the graph output the assertion names (else every output)."""
    item = mismatched_item(text)
    location.mismatched_output = item
    location.phase = "runtime"
    found = output_kernels(graphs, item, case_id, stamp)
    location.output_kernels = found
    if not found:
        return None, None, None
    first = next((k for k in found if k.kind != "extern"), found[0])
    graph = next(g for g in graphs if g.name == first.graph)
    kernel = graph.code.kernel_named(first.name) if graph.code else None
    named = any(k.role.endswith(NAMED_ITEM) for k in found)
    which = f"output {item} (the item the assertion names)" if named else "the outputs"
    writers = ", ".join(f"{k.name} [{', '.join(k.aten_ops) or 'ops unknown'}]" for k in found
                        if k.role.startswith("writes"))
    hows.append(f"a wrong result: {which} of graph {graph.name} {'is' if named else 'are'} written by {writers}")
    if layer is not None:
        hows.append(_localized(layer) + ("" if layer == "Inductor" else ": the kernels compute that output, but "
                                          "the wrong values are already there before Inductor"))
    else:
        hows.append("localize was not run: it tells whether only backend='inductor' computes it wrong")
    return graph, kernel, first.line or first.call_line
