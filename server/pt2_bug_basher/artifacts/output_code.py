"""Inductor's generated code (output_code.py): its kernels, where they are defined and called, what they compute."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

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

