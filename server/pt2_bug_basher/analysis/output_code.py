"""Inductor's generated code (output_code.py): its kernels, where they are defined and called, what they compute."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

_KERNEL_DEF_RE = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.M)
_EXTERN_RE = re.compile(r"\bextern_kernels\.(\w+)\(")
_SOURCE_NODES_RE = re.compile(r"#\s*(?:Topologically Sorted )?Source Nodes: \[([^\]]*)\]")
_PROVENANCE_HANDLE_RE = re.compile(r"#\s*\[Provenance debug handles\]\s*(\S+)")
_ORIGINAL_ATEN_RE = re.compile(r"Original ATen: \[([^\]]*)\]")
_CPP_PARAMS_RE = re.compile(r'extern "C"[^(]*?\bkernel\(([^)]*)\)', re.S)
# Lines of a kernel's source that say nothing about what it computes.
_BOILERPLATE = ("#include", "import ", "from ", "@triton_heuristics")
_CPP_FLAG = "inductor_cpu_integer_div_error"


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
    aten_ops: list[str] = field(default_factory=list)  # from an "Original ATen: [...]" comment
    comment: str = ""  # the source-node comment above its definition, when Inductor wrote one

    def params(self) -> list[str]:
        """Parameter names of the kernel function (in_ptr0, out_ptr0, in_out_ptr0, xnumel, ...)."""
        if self.kind == "cpp":
            match = _CPP_PARAMS_RE.search(self.body)
            items = match.group(1).split(",") if match else []
            return [m.group(1) for item in items if (m := re.search(r"(\w+)\s*$", item.strip()))]
        match = re.search(rf"^\s*def {re.escape(self.name)}\(([^)]*)\)", self.body, re.M)
        if not match:
            return []
        return [item.split(":", 1)[0].strip() for item in match.group(1).split(",") if item.strip()]

    def excerpt(self, max_chars: int, focus: str | None = None) -> str:
        """The kernel's code without includes, imports, decorators and blank lines, its indentation and braces
        kept (so its nesting reads as generated), within max_chars.

        Too long, it is cut after its head; with `focus` (a parameter such as out_ptr1), it keeps the lines
        that lead up to the last one using that parameter, where the kernel stores that output."""
        lines = self.body.splitlines()[1:]
        start = next((n for n, line in enumerate(lines) if line.lstrip().startswith(("@triton.jit", "def "))), 0)
        kept = []
        for line in lines[start:]:
            stripped = line.strip()
            if not stripped or stripped.startswith((*_BOILERPLATE, "'''")) or _CPP_FLAG in stripped:
                continue
            kept.append(line.rstrip())
        if kept:
            indent = min(len(line) - len(line.lstrip()) for line in kept)
            kept = [line[indent:] for line in kept]
        if sum(len(line) + 1 for line in kept) <= max_chars:
            return "\n".join(kept)
        uses = [n for n, line in enumerate(kept) if focus and re.search(rf"\b{re.escape(focus)}\b", line)]
        if len(uses) > 1:
            # the kernel's head (its signature and the accumulators it initialises), then the lines that lead up
            # to its last store of that output
            last = uses[-1]
            head = _first_lines(kept, max_chars // 3)
            window: list[str] = []
            size = sum(len(line) + 1 for line in head)
            for line in reversed(kept[len(head):last + 1]):
                if size + len(line) + 1 > max_chars:
                    break
                window.insert(0, line)
                size += len(line) + 1
            skipped, below = last + 1 - len(head) - len(window), len(kept) - last - 1
            gap = [f"... ({_lines(skipped)})"] if skipped else []
            tail = [f"... ({_lines(below)} more)"] if below else []
            return "\n".join([*head, *gap, *window, *tail])
        out: list[str] = []
        size = 0
        for number, line in enumerate(kept):
            if size + len(line) + 1 > max_chars:
                out.append(f"... ({_lines(len(kept) - number)} more)")
                break
            out.append(line)
            size += len(line) + 1
        return "\n".join(out)


def _first_lines(lines: list[str], max_chars: int) -> list[str]:
    out: list[str] = []
    size = 0
    for line in lines:
        if size + len(line) + 1 > max_chars:
            break
        out.append(line)
        size += len(line) + 1
    return out


def _lines(count: int) -> str:
    return f"{count} line" + ("" if count == 1 else "s")


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


def handle_above(lines: list[str], line: int) -> str | None:
    """The provenance debug handle in the comments just above a 1-based line of the wrapper."""
    for back in range(line - 2, max(-1, line - 6), -1):
        previous = lines[back].strip()
        if not previous.startswith("#"):
            break
        found = _PROVENANCE_HANDLE_RE.search(previous)
        if found:
            return found.group(1)
    return None


def _split_names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _origins(text: str) -> tuple[list[str], list[str]]:
    """FX nodes and ATen ops of a "Topologically Sorted Source Nodes: [...], Original ATen: [...]" comment."""
    nodes = _SOURCE_NODES_RE.search(text)
    if not nodes:
        return [], []
    aten = _ORIGINAL_ATEN_RE.search(text)
    return _split_names(nodes.group(1)), _split_names(aten.group(1)) if aten else []


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
                if not kernel.source_nodes:
                    kernel.source_nodes, kernel.aten_ops = _origins(previous)
    for kernel in kernels:
        # Triton kernels carry the comment just above their definition (or in their source).
        above = []
        for back in range(kernel.start - 2, max(-1, kernel.start - 40), -1):
            if not lines[back].startswith("#"):
                break
            above.append(lines[back])
        kernel.comment = "\n".join(line for line in reversed(above) if _SOURCE_NODES_RE.search(line)
                                   or "Original ATen" in line)
        for text_block in ("\n".join(reversed(above)), kernel.body):
            if kernel.source_nodes:
                break
            kernel.source_nodes, kernel.aten_ops = _origins(text_block)
    externs = Counter(_EXTERN_RE.findall(text))
    return OutputCode(lines, kernels, externs)

