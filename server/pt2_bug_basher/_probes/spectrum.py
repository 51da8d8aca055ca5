"""Run a script under coverage.py, recording which lines of torch's compiler packages ran.

    python spectrum.py --out FILE.json [--coverage-path DIR] [--none-returns | --fx-writers] -- script.py [args...]

The script (often launcher.py, which then runs the repro) runs as `__main__` exactly as it would
alone; its exit status and traceback are its own. On exit, FILE.json holds
{"torch": "<torch's parent folder>", "lines": {"torch/_dynamo/x.py": [lines that ran], ...}}.
`--coverage-path` is appended to sys.path (last: an interpreter's own coverage wins) for an
interpreter that lacks coverage. `--none-returns` also records, through a profile hook (about twice the
run's time), the functions of those packages that returned a None of their own that someone may have
wanted (an explicit `return None`; a bare return or the end of the body in a function that returns a value
elsewhere) before the exception that ended the run was raised, most recent first:
{"none_returns": [{"file", "function", "first_line", "line", "shared", "meet"}, ...]}: "shared" counts the
frames of the exception's traceback (outermost first, down its causes) to the deepest one that was also a
caller of that return, "meet" (0 and None when none was).

`--fx-writers` records, while FX generates the Python code of a graph (`CodeGen._gen_python_code`, under a
profile hook), which function of torch/fx wrote each piece of it:
{"fx_code": {"failing": [{"file", "line", "text"}, ...], "message": "...", "graphs": [{"src": the
generated code, "fragments": [[file, function, first_line, line, text, "append" or "return"], ...]}, ...]}}:
"failing" holds the exception's frames in FX-generated code, innermost first; "graphs" the last graphs generated
and the one that raised, most recent last; the fragments are in the order written.

Runs in the interpreter under investigation; imports nothing from pt2_bug_basher. Also run in children of the
fork server.
"""

from __future__ import annotations

import dis
import functools
import importlib.util
import inspect
import json
import linecache
import os
import sys
import threading
from collections import OrderedDict, deque

# torch's compiler: the packages whose lines make a run's spectrum (fx includes symbolic shapes)
PACKAGES = ("_dynamo", "_functorch", "_inductor", "fx", "_decomp", "_refs", "_prims", "_higher_order_ops",
            "_subclasses", "export", "_export")


MAX_NONE_RETURNS = 100
MAX_CALLERS = 400  # frames read up the stack at a None return, to meet the exception's traceback
_RETURNS = {dis.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST") if name in dis.opmap}
_SUSPENDING = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_SUSPENDS = {dis.opmap[name] for name in ("YIELD_VALUE", "SEND", "RETURN_GENERATOR") if name in dis.opmap}


def _none_returns(code) -> tuple[frozenset[int], bool]:
    """The offsets of the code's returns of a constant None, and whether another of its returns gives a value."""
    fresh, valued = set(), False
    previous = None
    for ins in dis.get_instructions(code):
        if ins.opname == "RETURN_CONST" or ins.opname == "RETURN_VALUE":
            none = (ins.argval is None if ins.opname == "RETURN_CONST" else
                    previous is not None and previous.opname == "LOAD_CONST" and previous.argval is None)
            if none:
                fresh.add(ins.offset)
            else:
                valued = True
        previous = ins
    return frozenset(fresh), valued


class _NoneReturns:
    """A profile hook: the functions under `roots` that returned a None of their own that someone may have
    wanted (an explicit `return None`, or a bare return or the end of the body of a function that returns a
    value elsewhere), in the order of their last such return; and when an exception left each frame (to find
    when the final one was raised)."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = tuple(roots)
        self.count = 0
        self.last: OrderedDict = OrderedDict()  # code -> (count, line)
        self.unwound: dict[int, int] = {}  # id(frame) -> count when an exception left it
        self.codes: dict = {}  # code -> _none_returns(code), or None when it is not under roots
        self.wanted: dict = {}  # (code, line) -> whether a None returned there may have been wanted
        # id(frame) -> count when it was entered (last resumed, for a generator): with the id, it names one
        # activation, so a None made beneath a frame is matched to the traceback's frame, not to another call
        # of the same function whose frame had that address before
        self.started: dict[int, int] = {}

    def _wanted(self, code, line: int, valued: bool) -> bool:
        key = (code, line)
        if key not in self.wanted:
            text = linecache.getline(code.co_filename, line).strip()
            self.wanted[key] = valued or text.startswith("return None")
        return self.wanted[key]

    def __call__(self, frame, event, arg) -> None:
        if event == "call":
            self.count += 1
            self.started[id(frame)] = self.count
            return
        if event != "return":
            return
        self.count += 1
        code = frame.f_code
        lasti = frame.f_lasti
        op = code.co_code[lasti] if 0 <= lasti < len(code.co_code) else None
        if op in _RETURNS:
            if arg is None:
                if code not in self.codes:
                    self.codes[code] = (_none_returns(code) if code.co_filename.startswith(self.roots)
                                        and not code.co_flags & _SUSPENDING else None)
                found = self.codes[code]
                if found is not None and lasti in found[0] and self._wanted(code, frame.f_lineno, found[1]):
                    callers: set[tuple[int, int | None]] = set()
                    up = frame.f_back
                    while up is not None and len(callers) < MAX_CALLERS:
                        callers.add((id(up), self.started.get(id(up))))
                        up = up.f_back
                    self.last[code] = (self.count, frame.f_lineno, frozenset(callers))
                    self.last.move_to_end(code)
            self.started.pop(id(frame), None)
        elif op not in _SUSPENDS:
            self.unwound[id(frame)] = self.count  # an exception left it: it may be the traceback's

    def start(self) -> None:
        threading.setprofile(self)
        sys.setprofile(self)

    def stop(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)

    def before(self, exc: BaseException, parent: str) -> list[dict]:
        """The functions that returned their own None before `exc` (or an exception it chains) was raised."""
        cut = None
        seen: set[int] = set()
        todo: list[BaseException | None] = [exc]
        while todo:
            one = todo.pop()
            if one is None or id(one) in seen:
                continue
            seen.add(id(one))
            tb = one.__traceback__
            while tb is not None:
                left = self.unwound.get(id(tb.tb_frame))
                cut = left if cut is None or (left is not None and left < cut) else cut
                tb = tb.tb_next
            todo += [one.__cause__, one.__context__]
        raised = [(id(f), self.started.get(id(f)), f.f_code) for f in _traceback_frames(exc)]
        out = []
        for code, (count, line, callers) in reversed(self.last.items()):
            if cut is not None and count >= cut:
                continue
            meet = max((i for i, (at, since, _) in enumerate(raised) if (at, since) in callers), default=None)
            meet_code = None if meet is None else raised[meet][2]
            out.append({"file": os.path.relpath(code.co_filename, parent).replace(os.sep, "/"),
                        "function": getattr(code, "co_qualname", code.co_name), "first_line": code.co_firstlineno,
                        "line": line, "shared": 0 if meet is None else meet + 1,
                        "meet": meet_code and getattr(meet_code, "co_qualname", meet_code.co_name)})
            if len(out) >= MAX_NONE_RETURNS:
                break
        return out


MAX_GRAPHS = 64  # the graphs whose generated code is kept, most recent last
MAX_FRAGMENT = 2000
MAX_FRAGMENTS = 50_000  # a graph's, reported
MAX_REPORTED_GRAPHS = 4
GENERATED_PREFIX = "<eval_with_key>"  # the file name FX gives the code it generates and runs


class _FxWriters:
    """A profile hook, on only while FX generates a graph's Python code: each string a function under `root`
    (torch/fx) returned or appended to a list is a fragment of that code, recorded with the function and line
    that wrote it."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.graphs: deque = deque(maxlen=MAX_GRAPHS)  # (src, fragments)
        self.open: list[list] = []  # the fragments of each code generation in progress, innermost last

    def __call__(self, frame, event, arg) -> None:
        if event == "return":
            text, kind = arg, "return"
        elif event == "c_return" and getattr(arg, "__name__", "") == "append":
            owner = getattr(arg, "__self__", None)
            text, kind = (owner[-1] if isinstance(owner, list) and owner else None), "append"
        else:
            return
        code = frame.f_code
        if isinstance(text, str) and text.strip() and self.open and code.co_filename.startswith(self.root):
            self.open[-1].append((code.co_filename, getattr(code, "co_qualname", code.co_name),
                                  code.co_firstlineno, frame.f_lineno, text[:MAX_FRAGMENT], kind))

    def wrap(self, generate):
        hook = self

        @functools.wraps(generate)
        def _gen_python_code(*args, **kwargs):
            previous = sys.getprofile()
            hook.open.append([])
            sys.setprofile(hook)
            try:
                result = generate(*args, **kwargs)
            finally:
                sys.setprofile(previous)
                fragments = hook.open.pop()
            src = getattr(result, "src", None)
            if isinstance(src, str):
                hook.graphs.append((src, fragments))
            return result
        return _gen_python_code

    def install(self) -> None:
        """Wrap FX's code generation now if torch.fx.graph is loaded (a fork server's child), else as it loads."""
        module = sys.modules.get("torch.fx.graph")
        if module is not None:
            self._patch(module)
            return
        hook = self

        class _Finder:
            @staticmethod
            def find_spec(name, path=None, target=None):
                if name != "torch.fx.graph":
                    return None
                sys.meta_path.remove(_Finder)
                spec = importlib.util.find_spec(name)
                if spec is None or spec.loader is None:
                    return spec
                load = spec.loader.exec_module

                def exec_module(module):
                    load(module)
                    hook._patch(module)
                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec

        sys.meta_path.insert(0, _Finder)

    def _patch(self, module) -> None:
        codegen = getattr(module, "CodeGen", None)
        generate = getattr(codegen, "_gen_python_code", None)
        if codegen is not None and generate is not None:
            codegen._gen_python_code = self.wrap(generate)

    def report(self, exc: BaseException, parent: str) -> dict:
        """The exception's frames in FX-generated code, and the last graphs' code with its fragments (the code
        that raised first, when its frames are still on the exception: FX re-raises from its own call without
        them, and the run's stderr has them)."""
        failing, src = [], None
        for frame in reversed(_traceback_frames(exc)):
            name = frame.f_code.co_filename
            if name.startswith(GENERATED_PREFIX):
                line = frame.f_lineno
                failing.append({"file": name, "line": line,
                                "text": linecache.getline(name, line, frame.f_globals).rstrip("\n")})
                if src is None:
                    src = "".join(linecache.getlines(name, frame.f_globals))
        raised = next((g for g in reversed(self.graphs) if g[0] == src), None)
        # most recent last, and the one that raised after them all: it is read first
        graphs = [g for g in list(self.graphs)[-MAX_REPORTED_GRAPHS:] if g is not raised] + (
            [raised] if raised is not None else [])
        return {"failing": failing, "message": f"{type(exc).__name__}: {exc}"[:2000],
                "graphs": [{"src": code, "fragments": [
                    [os.path.relpath(f, parent).replace(os.sep, "/"), function, first, line, text, kind]
                    for f, function, first, line, text, kind in fragments[:MAX_FRAGMENTS]]}
                    for code, fragments in graphs]}


def _traceback_frames(exc: BaseException) -> list:
    """The frames the exception went through, outermost first, down its chain of causes (a cause's traceback
    starts in the frame that caught it, the last of the one before)."""
    out: list = []
    seen: set[int] = set()
    one: BaseException | None = exc
    while one is not None and id(one) not in seen:
        seen.add(id(one))
        tb = one.__traceback__
        while tb is not None:
            out.append(tb.tb_frame)
            tb = tb.tb_next
        one = one.__cause__ or one.__context__
    return out


def _torch_parent() -> str | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(os.path.abspath(list(spec.submodule_search_locations)[0]))


def _start(extra_path: str | None):
    if extra_path and extra_path not in sys.path:
        sys.path.append(extra_path)
    parent = _torch_parent()
    try:
        import coverage
    except ImportError:
        print("spectrum: coverage is not importable: no spectrum recorded", file=sys.stderr)
        return None, parent
    if parent is None:
        return None, parent
    include = [os.path.join(parent, "torch", package, "*") for package in PACKAGES]
    cov = coverage.Coverage(data_file=None, include=include, config_file=False, branch=False)
    cov.start()
    return cov, parent


def _save(cov, parent: str, out: str, extra: dict) -> None:
    cov.stop()
    data = cov.get_data()
    lines: dict[str, list[int]] = {}
    for path in data.measured_files():
        found = data.lines(path)
        if found and path.endswith(".py") and os.path.isfile(path):  # not code torch generated under a made-up name
            lines[os.path.relpath(path, parent).replace(os.sep, "/")] = sorted(found)
    tmp = out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"torch": parent, "lines": lines, **extra}, fh)
    os.replace(tmp, out)


def _print_exception(exc: BaseException) -> None:
    """The traceback Python would print, without this probe's and the launcher's frames."""
    import traceback

    own = {os.path.abspath(__file__), os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")}
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in own:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)
    sys.stderr.flush()


def main(argv: list[str]) -> int:
    out = extra = None
    none_returns = fx_writers = False
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] in ("--none-returns", "--fx-writers"):
            none_returns = none_returns or argv[i] == "--none-returns"
            fx_writers = fx_writers or argv[i] == "--fx-writers"
            i += 1
        elif argv[i] in ("--out", "--coverage-path") and i + 1 < len(argv):
            if argv[i] == "--out":
                out = argv[i + 1]
            else:
                extra = argv[i + 1]
            i += 2
        else:
            print(f"spectrum: unknown option {argv[i]!r}", file=sys.stderr)
            return 2
    rest = argv[i + 1:]
    if out is None or not rest:
        print("spectrum: spectrum.py --out FILE [--coverage-path DIR] [--none-returns | --fx-writers] -- script.py "
              "[args]",
              file=sys.stderr)
        return 2
    import launcher  # same folder (sys.path[0], or the fork server's): runs a script as __main__

    cov, parent = _start(extra)
    hook = None
    if none_returns and parent is not None:
        hook = _NoneReturns([os.path.join(parent, "torch", package) + os.sep for package in PACKAGES])
        hook.start()
    writers = None
    if fx_writers and parent is not None and not none_returns:  # one profile hook at a time
        writers = _FxWriters(os.path.join(parent, "torch", "fx") + os.sep)
        writers.install()
    found: dict = {}
    code = 0
    try:
        launcher.run_script(rest[0], rest[1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # noqa: BLE001 - reported like the interpreter would
        sys.last_value = exc
        _print_exception(exc)
        code = 1
    finally:
        if hook is not None and parent is not None:
            hook.stop()
            # the launcher leaves the script's exception where Python's own hook would
            failed = getattr(sys, "last_value", None)
            if isinstance(failed, BaseException):
                found["none_returns"] = hook.before(failed, parent)
        if writers is not None and parent is not None:
            failed = getattr(sys, "last_value", None)
            if isinstance(failed, BaseException):
                found["fx_code"] = writers.report(failed, parent)
        if cov is not None and parent is not None:
            try:
                _save(cov, parent, out, found)
            except Exception as exc:  # noqa: BLE001 - the run's own outcome matters more than its spectrum
                print(f"spectrum: could not save coverage: {exc}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
