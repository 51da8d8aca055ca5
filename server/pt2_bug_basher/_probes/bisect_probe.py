"""The compiler bisector, seen from inside the interpreter under investigation.

    python bisect_probe.py table      # prints the case's torch BACKENDS table as JSON

`install_trace()` (called by `launcher.py --bisect-trace`) wraps
`CompilerBisector.disable_subsystem` so every application of the subsystem under bisection prints
one `PT2BB-BISECT: {json}` line to stderr: its counter, whether it was disabled, the bisector's own
debug info, the op or pass it concerns and the source of the function that does the work (the
lowering registered for the op, the decomposition in the table actually used, the pass function).
Runs in the case's interpreter; imports nothing from pt2_bug_basher.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import os
import sys

MARK = "PT2BB-BISECT:"
CALLS_MARK = "PT2BB-CALLED:"
CALLS_ENV = "PT2BB_COUNT_CALLS"
CODEGEN_MARK = "PT2BB-CODEGEN:"
CODEGEN_ENV = "PT2BB_TRACE_CODEGEN"
CONFIG_MODULES = {"inductor": "torch._inductor.config", "aot_eager_decomp_partition": "torch._functorch.config"}


def torch_parent() -> str:
    import torch

    return os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))


def unwrap(fn):
    """The function that does the work: through functools.wraps chains and partials."""
    for _ in range(20):
        if isinstance(fn, functools.partial):
            fn = fn.func
            continue
        inner = getattr(fn, "__wrapped__", None)
        if inner is None:
            inner = getattr(fn, "__func__", None)  # bound methods
        if inner is None or inner is fn:
            return fn
        fn = inner
    return fn


def where(fn) -> dict | None:
    """file (relative to torch's parent), line and qualified name of fn's definition."""
    fn = unwrap(fn)
    try:
        path = inspect.getsourcefile(fn)
        lines, line = inspect.getsourcelines(fn)
    except (TypeError, OSError):
        return None
    # the `def` line, not the first decorator's
    line += next((i for i, text in enumerate(lines) if text.lstrip().startswith(("def ", "async def ", "class "))),
                 0)
    if not path:
        return None
    path = os.path.abspath(path)
    root = torch_parent()
    rel = os.path.relpath(path, root) if path.startswith(root + os.sep) else path
    return {"file": rel, "abs": path, "line": line,
            "function": getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))}


def _config_line(module_name: str, field: str) -> dict | None:
    import importlib

    module = importlib.import_module(module_name)
    path = os.path.abspath(module.__file__ or "")
    try:
        with open(path) as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == field for t in targets):
            root = torch_parent()
            return {"file": os.path.relpath(path, root), "abs": path, "line": node.lineno,
                    "function": f"{module_name}.{field}"}
    return None


def table() -> dict:
    import torch
    from torch._inductor import compiler_bisector as cb

    backends = {}
    for backend, subsystems in cb.BACKENDS.items():
        rows = []
        for sub in subsystems:
            row: dict[str, object] = {"name": sub.name, "kind": "config" if isinstance(sub, cb.ConfigChange) else
                   "binary" if isinstance(sub, cb.BinarySubsystem) else "bisect"}
            if isinstance(sub, cb.ConfigChange):
                module = CONFIG_MODULES.get(sub.config_name)
                row.update(config_name=sub.config_name, field=sub.config_field, value=repr(sub.config_value),
                           knob=_config_line(module, sub.config_field) if module else None)
            rows.append(row)
        backends[backend] = rows
    return {"backends": backends, "cuda": bool(torch.cuda.is_available()), "torch_parent": torch_parent(),
            "torch_version": torch.__version__}


CPP, TRITON = "torch._inductor.codegen.cpp", "torch._inductor.codegen.triton"
OVERRIDES = {"cpu": ((CPP, "CppVecOverrides"), (CPP, "CppOverrides")),
             "cuda": ((TRITON, "TritonOverrides"),), "xpu": ((TRITON, "TritonOverrides"),)}


def _closure(fn) -> dict:
    names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    return {name: cell.cell_contents for name, cell in zip(names, getattr(fn, "__closure__", None) or (), strict=False)
            if _filled(cell)}


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _device(node) -> str:
    value = node.meta.get("val")
    device = getattr(value, "device", None)
    return getattr(device, "type", None) or "cpu"


def lowering_sites(node) -> list[dict]:
    """Where the op of an FX node is lowered, most specific first: a pointwise op made by
    `make_pointwise(ops_wrapper(name))` is generated by the backend's ops override of that name."""
    import importlib

    from torch._inductor.lowering import lowerings

    impl = lowerings.get(node.target)
    if impl is None:
        return []
    sites = []
    op_name = _closure(_closure(unwrap(impl)).get("fn")).get("name")
    if isinstance(op_name, str):
        for module_name, class_name in OVERRIDES.get(_device(node), ()):
            cls = getattr(importlib.import_module(module_name), class_name, None)
            method = getattr(cls, op_name, None) if cls is not None else None
            if callable(method) and (site := where(method)) is not None:
                sites.append(site)
    if (site := where(impl)) is not None:
        sites.append(site)
    return sites


def _subject(debug_info, frame) -> tuple[str | None, list[dict]]:
    """(the op or pass this application concerns, where its implementation is, most specific first)."""
    import torch

    for value in _closure(debug_info).values():
        if isinstance(value, torch.fx.Node):
            return str(value.target), lowering_sites(value)
        if isinstance(value, torch._ops.OpOverload):
            table = frame.f_locals.get("decomp_table") if frame is not None else None
            impl = table.get(value) if isinstance(table, dict) else None
            site = where(impl) if impl is not None else None
            return str(value), [site] if site else []
        passname = getattr(value, "passname", None)
        if isinstance(passname, str):
            caller = frame
            for _ in range(4):
                if caller is None:
                    break
                fn = caller.f_locals.get("pass_fn")
                if callable(fn):
                    site = where(fn)
                    return passname, [site] if site else []
                caller = caller.f_back
            return passname, []
    return None, []


def install_trace() -> None:
    from torch._inductor import compiler_bisector
    from torch._inductor.compiler_bisector import CompilerBisector

    # In a child forked from a warm interpreter the bisector may have read the environment already.
    compiler_bisector.get_env_val.cache_clear()
    CompilerBisector.bisection_enabled = compiler_bisector.get_is_bisection_enabled()

    original = CompilerBisector.disable_subsystem.__func__  # type: ignore[attr-defined]
    counters: dict[str, int] = {}

    def traced(cls, backend, subsystem, debug_info=None):
        active = cls.bisection_enabled and cls.get_backend() == backend and cls.get_subsystem() == subsystem
        disabled = original(cls, backend, subsystem, debug_info)
        if not active:
            return disabled
        counter = counters.get(subsystem, 0)
        counters[subsystem] = counter + 1
        info = None
        subject: str | None = None
        sites: list[dict] = []
        try:
            info = debug_info() if debug_info is not None else None
            subject, sites = _subject(debug_info, sys._getframe(1))
        except Exception as exc:  # noqa: BLE001 - a trace line must never break the run
            info = info or f"<debug info failed: {exc!r}>"
        line = {"subsystem": subsystem, "counter": counter, "disabled": bool(disabled), "debug": info,
                "subject": subject, "sites": sites}
        print(MARK, json.dumps(line), file=sys.stderr, flush=True)
        return disabled

    CompilerBisector.disable_subsystem = classmethod(traced)  # type: ignore[method-assign,assignment]
    if os.environ.get(CALLS_ENV):
        count_calls(os.environ[CALLS_ENV])
    if os.environ.get(CODEGEN_ENV):
        trace_codegen()


def count_calls(spec: str) -> None:
    """spec 'package.module:name1,name2': count calls of those module-level functions (through the
    module's globals, as the code calls them) and print the counts at exit."""
    import atexit
    import importlib

    module_name, _, names = spec.partition(":")
    module = importlib.import_module(module_name)
    counts = dict.fromkeys(filter(None, names.split(",")), 0)

    def counted(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    for name in list(counts):
        fn = getattr(module, name, None)
        if callable(fn):
            setattr(module, name, counted(name, fn))
        else:
            counts.pop(name)
    atexit.register(lambda: print(CALLS_MARK, json.dumps(counts), file=sys.stderr, flush=True))


def _def_line(path: str, line: int) -> int:
    """A decorated function's code starts at its first decorator: the line of its `def` instead."""
    import linecache

    if not linecache.getline(path, line).lstrip().startswith("@"):
        return line
    for offset in range(1, 30):
        if linecache.getline(path, line + offset).lstrip().startswith(("def ", "async def ")):
            return line + offset
    return line


def profile_during_codegen(profile) -> None:
    """`profile` as the profile hook while Inductor's GraphLowering.codegen runs, and only then."""
    from torch._inductor.graph import GraphLowering

    original = GraphLowering.codegen

    @functools.wraps(original)
    def traced(self, *args, **kwargs):
        before = sys.getprofile()
        sys.setprofile(profile)
        try:
            return original(self, *args, **kwargs)
        finally:
            sys.setprofile(before)

    GraphLowering.codegen = traced  # type: ignore[method-assign]


def trace_codegen() -> None:
    """Record which functions of Inductor's code generation (torch/_inductor/codegen/) run while a graph's
    kernels are generated (inside GraphLowering.codegen only, so tracing costs little), how often, and
    whether they returned code text; printed in first-call order at exit."""
    import atexit

    import torch._inductor.codegen

    root = os.path.dirname(os.path.abspath(torch._inductor.codegen.__file__)) + os.sep
    parent = torch_parent()
    seen: dict[tuple[str, int, str], list] = {}

    def profile(frame, event, arg):
        code = frame.f_code
        if not code.co_filename.startswith(root):
            return
        key = (code.co_filename, code.co_firstlineno, getattr(code, "co_qualname", code.co_name))
        if event == "call":
            entry = seen.setdefault(key, [0, False])
            entry[0] += 1
        elif event == "return" and isinstance(arg, str) and key in seen:
            seen[key][1] = True

    profile_during_codegen(profile)

    def report() -> None:
        rows = [{"file": os.path.relpath(path, parent), "abs": path, "line": _def_line(path, line), "function": name,
                 "calls": calls, "emits": emits} for (path, line, name), (calls, emits) in seen.items()]
        print(CODEGEN_MARK, json.dumps(rows), file=sys.stderr, flush=True)

    atexit.register(report)


if __name__ == "__main__":
    if sys.argv[1:] != ["table"]:
        raise SystemExit("usage: bisect_probe.py table")
    print(json.dumps(table()))
