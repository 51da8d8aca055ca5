"""Run a repro script with torch.compile's backend and/or `dynamic` forced, without editing it.

    python launcher.py [--backend NAME] [--dynamic true|false] [--no-mark] [--bisect-trace] [--kernel-origins FILE]
                       -- script.py [args...]

Patches `torch.compile` and `torch._dynamo.optimize` before the script runs, then runs the script
as `__main__` (its own directory first on sys.path, its own argv), so the failure is reported as
if the script had been run directly. With a non-Inductor backend, Inductor-only arguments (`mode`,
`options`) are dropped. Each patched call prints one line starting with `PT2BB-LAUNCHER:` to
stderr, so the caller can tell that the script reached torch.compile at all. When the script ends (it raised: at that
moment, before its traceback), one line starting with `PT2BB-COMPILED:` gives Dynamo's counters as
JSON: the frames Dynamo began converting (`frames`), those it converted (`frames_ok`), and the backend
compilations timed (`backend_compiles`): the caller's proof that a compiled call ran before the end.
`--bisect-trace`
prints each application of the subsystem the compiler bisector is bisecting (`bisect_probe.py`).
`--kernel-origins FILE` records which of Inductor's functions wrote each line of generated code and made the
code text in it (`kernel_origins.py`).

Runs in the interpreter under investigation; imports nothing from pt2_bug_basher. Also imported by
the fork server (`forkserver.py`, same folder), which calls `run_script` in forked children.
"""

from __future__ import annotations

import os
import sys
import traceback

MARK = "PT2BB-LAUNCHER:"
COMPILED_MARK = "PT2BB-COMPILED:"
# dynamo_timed phases that compile a captured graph (the FX minifier's repros call them without Dynamo)
_BACKEND_TIMERS = ("OutputGraph.call_user_compiler", "compile_fx_inner", "create_aot_dispatcher_function")
_THIS = os.path.abspath(__file__)
# torch's own torch.compile calls that choose their backend on purpose, left as they are and not announced: a
# higher-order op run eagerly (torch.cond, while_loop, ... in eager code or under torch.export) compiles its body
_OWN_CALLERS = (os.path.join("torch", "_higher_order_ops", ""),)


def _parse_dynamic(value: str | None):
    if value is None or value in ("", "none", "None"):
        return "keep"
    return {"true": True, "false": False}[value.lower()]


def patch_torch(backend: str | None, dynamic="keep", mark: bool = True) -> None:
    """Force the backend (None: keep the script's) and dynamic ("keep": keep the script's)."""
    if backend is None and dynamic == "keep":
        return
    import torch
    import torch._dynamo

    original_compile = torch.compile
    original_optimize = torch._dynamo.optimize
    depth = [0]  # torch.compile calls itself (decorator form) and optimize: patch the outermost call only

    def say(what: str) -> None:
        if mark:
            print(f"{MARK} {what}", file=sys.stderr, flush=True)

    def torchs_own(frame) -> bool:
        return any(part in frame.f_code.co_filename for part in _OWN_CALLERS)

    def forced_compile(model=None, *args, **kwargs):
        if depth[0]:
            return original_compile(*args, **kwargs) if model is None else original_compile(model, *args, **kwargs)
        if not torchs_own(sys._getframe(1)):  # torch's own call runs as it is, and its optimize too (depth)
            before = kwargs.get("backend", "inductor")
            if backend is not None:
                kwargs["backend"] = backend
                if backend != "inductor":
                    kwargs.pop("mode", None)
                    kwargs.pop("options", None)
            if dynamic != "keep":
                kwargs["dynamic"] = dynamic
            say(f"torch.compile backend={_name(before)}->{_name(kwargs.get('backend', 'inductor'))} "
                f"dynamic={kwargs.get('dynamic')}")
        if model is None:  # decorator with arguments: the decorator it returns calls torch.compile again
            inner = original_compile(*args, **kwargs)

            def decorate(fn):
                depth[0] += 1
                try:
                    return inner(fn)
                finally:
                    depth[0] -= 1

            return decorate
        depth[0] += 1
        try:
            return original_compile(model, *args, **kwargs)
        finally:
            depth[0] -= 1

    def forced_optimize(*args, **kwargs):
        if depth[0] or torchs_own(sys._getframe(1)):
            return original_optimize(*args, **kwargs)
        before = kwargs.get("backend", args[0] if args else "inductor")
        if backend is not None:
            if args:
                args = (backend, *args[1:])
            else:
                kwargs["backend"] = backend
        if dynamic != "keep":
            kwargs["dynamic"] = dynamic
        say(f"torch._dynamo.optimize backend={_name(before)}->{_name(backend or before)} "
            f"dynamic={kwargs.get('dynamic')}")
        return original_optimize(*args, **kwargs)

    torch.compile = forced_compile
    torch._dynamo.optimize = forced_optimize


def _name(backend) -> str:
    if isinstance(backend, str):
        return backend
    return getattr(backend, "__name__", None) or type(backend).__name__


def compiled_counts() -> dict:
    """What compiled so far in this process (all zero when Dynamo was never imported)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return {"frames": 0, "frames_ok": 0, "backend_compiles": 0}
    frames = utils.counters.get("frames", {})
    timed = getattr(utils, "compilation_time_metrics", {})
    # fullgraph=True converts frames without the frame counters: its timed phases count them
    return {"frames": max(int(frames.get("total", 0)), len(timed.get("_compile.compile_inner", ()))),
            "frames_ok": max(int(frames.get("ok", 0)), len(timed.get("build_guards", ()))),
            "backend_compiles": sum(len(timed.get(name, ())) for name in _BACKEND_TIMERS)}


def report_compiled() -> None:
    import json

    print(f"{COMPILED_MARK} {json.dumps(compiled_counts(), sort_keys=True)}", file=sys.stderr, flush=True)


def run_script(script: str, args: list[str]) -> None:
    """Run script as __main__, as `python script args` would (exceptions propagate)."""
    script = os.path.abspath(script)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(script)
    with open(script, "rb") as fh:
        source = fh.read()
    code = compile(source, script, "exec")
    import types

    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def print_exception(exc: BaseException) -> None:
    """The traceback Python would print, without this launcher's own frames."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in _OWN_FILES:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)
    sys.stderr.flush()


_OWN_FILES = {_THIS, os.path.join(os.path.dirname(_THIS), "forkserver.py")}


def _probe(name: str):
    """A probe module of this folder, loaded under a private name (the script's own modules stay its own)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"pt2bb_{name}", os.path.join(os.path.dirname(_THIS), f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install_bisect_trace() -> None:
    _probe("bisect_probe").install_trace()


def main(argv: list[str]) -> int:
    backend = None
    dynamic = "keep"
    mark = True
    bisect_trace = False
    kernel_origins = None
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--backend":
            backend = argv[i + 1] or None
            i += 2
        elif argv[i] == "--dynamic":
            dynamic = _parse_dynamic(argv[i + 1])
            i += 2
        elif argv[i] == "--no-mark":
            mark = False
            i += 1
        elif argv[i] == "--bisect-trace":
            bisect_trace = True
            i += 1
        elif argv[i] == "--kernel-origins" and i + 1 < len(argv):
            kernel_origins = argv[i + 1]
            i += 2
        else:
            print(f"launcher: unknown option {argv[i]!r}", file=sys.stderr)
            return 2
    rest = argv[i + 1:]
    if not rest:
        print("launcher: no script given (launcher.py [options] -- script.py [args])", file=sys.stderr)
        return 2
    patch_torch(backend, dynamic, mark)
    if bisect_trace:
        install_bisect_trace()
    if kernel_origins:
        _probe("kernel_origins").install(kernel_origins, _probe("bisect_probe").profile_during_codegen)
    try:
        run_script(rest[0], rest[1:])
    except SystemExit:
        report_compiled()
        raise
    except BaseException as exc:  # noqa: BLE001 - reported like the interpreter would
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__  # as Python's own hook
        report_compiled()
        print_exception(exc)
        return 1
    report_compiled()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
