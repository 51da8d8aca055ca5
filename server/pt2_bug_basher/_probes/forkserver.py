"""A pre-forked evaluator: imports torch once, then forks one child per script run.

    python forkserver.py SOCKET_PATH [MODULE ...] [--idle S] [--parent PID] [--watch]

Each client connection carries one JSON request line:
    {"script": path, "args": [...], "cwd": dir, "stdout": path, "stderr": path, "timeout": s,
     "path": [extra sys.path entries], "backend": null|name, "dynamic": "keep"|true|false,
     "env": {variables set in the child first}, "bisect_trace": bool}
or {"shutdown": true}. The server forks a child (its own process group) that redirects fds 1
and 2 to the given files and runs the script as __main__ exactly like launcher.py does, and
answers one JSON line: {"exit_code", "signal", "timed_out", "duration_s", "pid"}. Such a child
prints launcher.py's `PT2BB-COMPILED:` line (what compiled before the script ended) to its stderr. A child that
outlives its timeout, or whose client hangs up, is killed with its whole group.

A warm run (`"warm": true`: a case's run of `python script.py`, `python -m module` (`"module"`) or
`python -c code` (`"code"`)) looks to the child like a new interpreter: its stdout and stderr are
the two file descriptors sent with the request (SCM_RIGHTS) instead of files, stdin is /dev/null,
sys.path is the one `python` would give it (`"append_path"` entries last), the random generators of
`random` and numpy are reseeded from the OS, and non-daemon threads are joined before the exit
handlers run. The server answers {"started": pid} as soon as it forked, then the exit line.

With --watch the server refuses ({"stale": file}), then exits, once a source file of what it
imported (every imported module's file, every .py file of the preloaded top-level packages) changed
since it started: no child ever runs code older than the files. It refuses ({"refused": why}) to
fork once CUDA is initialised in it. It declines one run ({"declined": why}) whose first sys.path
folder holds a module it imported from elsewhere (a new interpreter would import that one), or whose
"env" changes a variable its imports read (os.environ lookups recorded while they ran; any variable
once torch's own code iterated over the environment; TORCH_LOGS and its companions excepted: the child
configures torch's logging again from them, and TORCHDYNAMO_VERBOSE: the child sets the config value it was
read into); "env" values of null unset a variable.
--idle: exit after S seconds without a request; --parent: exit when that process is gone.

The environment (TORCH_LOGS, TORCHINDUCTOR_* ...) is the server's own: torch reads much of it at
import time, so every request of one server shares it; a request's "env" is only for variables read
at call time (the compiler bisector's TORCH_BISECT_*, a PYTHONPATH whose extra entries are appended,
what the warm run's checks allow). Only the main thread ever forks. Imports nothing from
pt2_bug_basher; runs in the interpreter under investigation.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
# Read by torch's logging set-up (torch._logging._internal._init_logs), which a warm child runs again.
LOGGING_VARS = frozenset({"TORCH_LOGS", "TORCH_LOGS_OUT", "TORCH_LOGS_FORMAT", "TORCH_LOGS_TRACE_ID_FILTER"})
# Read once into a config value when torch imported, and only that value read later: a child sets the value
# from the variable as the import did. variable -> (module, attribute, the import's reading of the text)
RECONFIGURED = {"TORCHDYNAMO_VERBOSE": ("torch._dynamo.config", "verbose", lambda text: text == "1")}


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            target()


def _redirect(request: dict, fds: list[int]) -> None:
    """fds 1 and 2 from the request's files, or (warm runs) from the descriptors it sent; stdin closed."""
    if fds:
        out, err = fds[0], fds[1]
    else:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        out = os.open(request["stdout"], flags, 0o644)
        err = os.open(request["stderr"], flags, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    if request.get("warm"):
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)


def _as_fresh_interpreter(request: dict) -> None:
    """What a new `python script.py` (or `python -m module`) would have that a fork does not."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        with contextlib.suppress(Exception):
            numpy.random.seed()
    if request.get("code") is not None:
        first = ""
    elif request.get("module"):
        first = os.getcwd()
    else:
        first = os.path.dirname(os.path.abspath(request["script"]))
    sys.path[:] = [first, *(p for p in sys.path if p != HERE), *(request.get("append_path") or [])]


def _finish_like_python() -> None:
    """Join non-daemon threads, then run the exit handlers, as interpreter shutdown does."""
    import threading

    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]


def _child(request: dict, closing: list, fds: list[int]) -> None:
    code = 1
    warm = bool(request.get("warm"))
    try:
        os.setpgid(0, 0)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        if warm:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        for sock in closing:
            with contextlib.suppress(OSError):
                sock.close()
        _redirect(request, fds)
        for name, value in (request.get("env") or {}).items():
            if value is None:
                os.environ.pop(str(name), None)
            else:
                os.environ[str(name)] = str(value)
        if warm and LOGGING_VARS & set(request.get("env") or {}):
            # torch configured its logging from these when imported; it does so again (its own test helpers
            # do the same after changing them), so the child logs as a new interpreter with them would.
            sys.modules["torch"]._logging._internal._init_logs()
        for name in RECONFIGURED.keys() & set(request.get("env") or {}) if warm else ():
            module, attribute, reading = RECONFIGURED[name]
            setattr(sys.modules[module], attribute, reading(os.environ.get(name, "")))
        os.chdir(request.get("cwd") or os.path.dirname(request["script"]))
        import faulthandler

        faulthandler.enable()
        import launcher

        launcher.patch_torch(request.get("backend"), request.get("dynamic", "keep"), mark=False)
        if request.get("bisect_trace"):
            launcher.install_bisect_trace()
        extra = [p for p in request.get("path") or [] if p]
        try:
            if warm:
                _as_fresh_interpreter(request)
            else:
                sys.path[1:1] = extra
            if request.get("module"):
                import runpy

                sys.argv = [request["module"], *list(request.get("args") or [])]
                runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            elif request.get("code") is not None:
                main = types.ModuleType("__main__")
                main.__builtins__ = __builtins__  # type: ignore[attr-defined]
                sys.modules["__main__"] = main
                sys.argv = ["-c", *list(request.get("args") or [])]
                exec(compile(request["code"], "<string>", "exec"), main.__dict__)
            else:
                launcher.run_script(request["script"], list(request.get("args") or []))
            code = 0
            if not warm:
                launcher.report_compiled()
        except SystemExit as exc:
            if not warm:
                launcher.report_compiled()
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException as exc:  # noqa: BLE001 - printed like the interpreter would
            if not warm:
                launcher.report_compiled()
            launcher.print_exception(exc)
            code = 1
        if warm:
            _finish_like_python()
        try:
            import atexit

            atexit._run_exitfuncs()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
        os._exit(code & 0xFF if code >= 0 else 1)


def _package_roots(preloaded: list[str]) -> list[str]:
    """The folders of the top-level packages of the preloaded modules."""
    roots = []
    for name in preloaded:
        path = getattr(sys.modules.get(name.split(".")[0]), "__file__", None)
        if isinstance(path, str) and os.path.basename(path) == "__init__.py":
            roots.append(os.path.dirname(os.path.abspath(path)))
    return sorted(set(roots))


class Sources:
    """The files the server's imports came from, as they were: (mtime_ns, size) per path."""

    def __init__(self, started_ns: int, preloaded: list[str]) -> None:
        self.started_ns = started_ns
        self.seen: dict[str, tuple[int, int]] = {}
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str) and os.path.isabs(path):
                self._add(path)
        # the preloaded packages' not-yet-imported files too (torch's compile-cache key hashes them all)
        for root in _package_roots(preloaded):
            for folder, dirs, files in os.walk(root):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                for name in files:
                    if name.endswith(".py"):
                        self._add(os.path.join(folder, name))

    def _add(self, path: str) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return
        self.seen[path] = (st.st_mtime_ns, st.st_size)

    def changed(self) -> str | None:
        """The first file that changed (or was written while the imports ran), else None."""
        for path, (mtime, size) in self.seen.items():
            try:
                st = os.stat(path)
            except OSError:
                return path
            if (st.st_mtime_ns, st.st_size) != (mtime, size) or mtime >= self.started_ns:
                return path
        return None


def _first_path_entry(request: dict) -> str:
    """The directory `python` would put first on sys.path for this run ('' means the working directory)."""
    if request.get("code") is not None or request.get("module"):
        return request.get("cwd") or os.getcwd()
    return os.path.dirname(os.path.abspath(request["script"]))


def _shadowing(folder: str) -> str | None:
    """A module already imported here that a new interpreter would import from `folder` instead (it comes
    first on sys.path): a new process must run it. None when there is none."""
    try:
        names = set(os.listdir(folder))
    except OSError:
        return None
    for name, module in list(sys.modules.items()):
        if "." in name or name == "__main__":
            continue
        if not ({name, name + ".py"} & names or any(n.startswith(name + ".") and n.endswith((".so", ".pyd"))
                                                    for n in names)):
            continue
        where = getattr(module, "__file__", None)
        if not where or not os.path.abspath(where).startswith(os.path.join(os.path.abspath(folder), "")):
            return name
    return None


def _declined(request: dict) -> str | None:
    """Why this one run needs a new interpreter: a variable it changes was read by the imports, or a module
    imported here would come from the run's first sys.path folder instead. None when a fork will do."""
    changes = {k: v for k, v in (request.get("env") or {}).items() if k != "PYTHONPATH"}
    if LOGGING_VARS & set(changes):
        internal = getattr(getattr(sys.modules.get("torch"), "_logging", None), "_internal", None)
        if not callable(getattr(internal, "_init_logs", None)):
            return "this torch cannot configure its logging again from TORCH_LOGS"
        changes = {k: v for k, v in changes.items() if k not in LOGGING_VARS}
    changes = {k: v for k, v in changes.items() if not (k in RECONFIGURED and RECONFIGURED[k][0] in sys.modules)}
    read = ENV_READS.blocks(changes)
    if read is not None:
        return f"{read} differs from the server's environment and was read when it imported torch"
    shadowed = _shadowing(_first_path_entry(request))
    if shadowed is not None:
        return f"{shadowed} would be imported from the run's first sys.path folder"
    return None


def _refusal() -> dict | None:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            return {"refused": "CUDA is initialised in the fork server; a process that did so is never forked"}
    except Exception as exc:  # noqa: BLE001 - a torch without the query: refuse rather than guess
        return {"refused": f"cannot tell whether CUDA is initialised: {exc}"}
    return None


def serve(path: str, *, idle_s: float | None = None, parent: int | None = None, sources: Sources | None = None) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        os.unlink(tmp)
    listener.bind(tmp)
    listener.listen(64)
    os.rename(tmp, path)  # the socket appears only once it accepts
    jobs: dict[int, dict] = {}  # pid -> {conn, deadline, started, timed_out}
    pending: dict[socket.socket, bytes] = {}
    received: dict[socket.socket, list[int]] = {}
    running = [True]

    def stop(*_):
        running[0] = False

    signal.signal(signal.SIGTERM, stop)
    print(f"PT2BB-FORKSERVER: ready pid={os.getpid()}", flush=True)
    last_request = time.monotonic()
    stale: list[str] = []
    while running[0] or jobs:
        if not running[0] and not stale:
            for pid in list(jobs):
                _kill_group(pid)
        if running[0] and not jobs and not pending and idle_s is not None and time.monotonic() - last_request > idle_s:
            running[0] = False
        if running[0] and parent is not None and os.getppid() != parent:
            running[0] = False  # the process that started it is gone
        watch = [listener, *pending, *(j["conn"] for j in jobs.values())] if running[0] else []
        try:
            readable, _, _ = select.select(watch, [], [], 0.05)
        except InterruptedError:
            readable = []
        for sock in readable:
            if sock is listener:
                conn, _ = listener.accept()
                pending[conn] = b""
            elif sock in pending:
                try:
                    chunk, fds, _flags, _addr = socket.recv_fds(sock, 65536, 2)
                except OSError:
                    chunk, fds = b"", []
                received.setdefault(sock, []).extend(fds)
                if not chunk:
                    pending.pop(sock)
                    _close_fds(received.pop(sock, []))
                    sock.close()
                    continue
                pending[sock] += chunk
                if b"\n" not in pending[sock]:
                    continue
                request = json.loads(pending.pop(sock).split(b"\n", 1)[0])
                fds = received.pop(sock, [])
                last_request = time.monotonic()
                if request.get("shutdown"):
                    running[0] = False
                    sock.close()
                    continue
                answer = _refusal() if request.get("warm") else None
                declined = _declined(request) if request.get("warm") and not answer else None
                if declined is not None:  # this run only: the server stays
                    _close_fds(fds)
                    with contextlib.suppress(OSError):
                        sock.sendall((json.dumps({"declined": declined}) + "\n").encode())
                    sock.close()
                    continue
                if answer is None and sources is not None and running[0]:
                    changed = sources.changed()
                    if changed is not None:
                        answer = {"stale": changed}
                        stale.append(changed)
                        running[0] = False  # no new child; running ones finish
                if answer is None and not running[0]:
                    answer = {"stale": stale[0]} if stale else {"refused": "the server is stopping"}
                if answer is not None:
                    _close_fds(fds)
                    with contextlib.suppress(OSError):
                        sock.sendall((json.dumps(answer) + "\n").encode())
                    sock.close()
                    continue
                if request.get("warm") and len(fds) != 2:
                    _close_fds(fds)
                    with contextlib.suppress(OSError):
                        sock.sendall(b'{"refused": "a warm run sends its stdout and stderr descriptors"}\n')
                    sock.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                closing = [listener, sock, *pending, *(j["conn"] for j in jobs.values())]
                pid = os.fork()
                if pid == 0:
                    _child(request, closing, fds)
                _close_fds(fds)
                if request.get("warm"):
                    with contextlib.suppress(OSError):
                        sock.sendall((json.dumps({"started": pid}) + "\n").encode())
                now = time.monotonic()
                jobs[pid] = {"conn": sock, "started": now, "deadline": now + float(request.get("timeout") or 600),
                             "timed_out": False}
            else:  # a client with a running job: data or hang-up means it gave up
                for pid, job in list(jobs.items()):
                    if job["conn"] is sock:
                        _kill_group(pid)
                        job["gone"] = True
        now = time.monotonic()
        for pid, job in jobs.items():
            if now > job["deadline"] and not job["timed_out"]:
                job["timed_out"] = True
                _kill_group(pid)
        while jobs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid not in jobs:
                continue
            job = jobs.pop(pid)
            _kill_group(pid)  # whatever the script left in its group
            exit_code = os.waitstatus_to_exitcode(status)
            reply = {"pid": pid, "exit_code": exit_code, "timed_out": job["timed_out"],
                     "signal": signal.Signals(-exit_code).name if exit_code < 0 and not job["timed_out"] else None,
                     "duration_s": round(time.monotonic() - job["started"], 3)}
            try:
                if not job.get("gone"):
                    job["conn"].sendall((json.dumps(reply) + "\n").encode())
            except OSError:
                pass
            job["conn"].close()
    listener.close()
    with contextlib.suppress(OSError):
        os.unlink(path)


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class EnvReads:
    """The environment variables the preload read through os.environ, by name; and whether code of the
    preloaded packages iterated over the whole environment (then any variable may have been read)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.iterated_from: list[str] = []
        self.whole = False
        self._saved: dict[str, object] = {}

    def __enter__(self) -> EnvReads:
        cls = type(os.environ)
        names, iterated_from = self.names, self.iterated_from
        for method in ("__getitem__", "__contains__", "__iter__"):
            self._saved[method] = getattr(cls, method)
        getitem, contains, iterate = (self._saved[m] for m in ("__getitem__", "__contains__", "__iter__"))

        def read_item(env, key):
            caller = sys._getframe(1).f_code
            if not (caller.co_name == "__iter__" and "_collections_abc" in caller.co_filename):
                names.add(key)  # a lookup by name, not the values of a whole-environment iteration
            return getitem(env, key)  # type: ignore[operator]

        def read_contains(env, key):
            names.add(key)
            return contains(env, key)  # type: ignore[operator]

        def read_all(env):
            frame: types.FrameType | None = sys._getframe(1)
            while frame is not None and (frame.f_code.co_filename.startswith("<")
                                         or frame.f_code.co_filename.endswith(("_collections_abc.py", "os.py"))):
                frame = frame.f_back
            iterated_from.append(os.path.abspath(frame.f_code.co_filename) if frame is not None else "")
            return iterate(env)  # type: ignore[operator]

        cls.__getitem__, cls.__contains__, cls.__iter__ = read_item, read_contains, read_all  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc) -> None:
        cls = type(os.environ)
        for method, original in self._saved.items():
            setattr(cls, method, original)

    def settle(self, roots: list[str]) -> None:
        """An iteration by code of the preloaded packages counts as reading everything; one by another
        library (networkx scanning for its own prefix) does not."""
        self.whole = any(not where or any(where.startswith(os.path.join(root, "")) for root in roots)
                         for where in self.iterated_from)

    def blocks(self, changes: dict) -> str | None:
        """A variable among `changes` that the imports read (a new interpreter would have read the new value)."""
        if self.whole and changes:
            return next(iter(changes))
        return next((name for name in changes if name in self.names), None)


ENV_READS = EnvReads()


def main(argv: list[str]) -> int:
    sys.path.insert(0, HERE)
    started_ns = time.time_ns()
    started = time.perf_counter()
    modules: list[str] = []
    idle_s = parent = None
    watch = False
    rest = list(argv[1:])
    while rest:
        item = rest.pop(0)
        if item == "--idle":
            idle_s = float(rest.pop(0))
        elif item == "--parent":
            parent = int(rest.pop(0))
        elif item == "--watch":
            watch = True
        else:
            modules.append(item)
    with ENV_READS:
        for name in modules or ["torch"]:
            __import__(name)
    ENV_READS.settle(_package_roots(modules or ["torch"]))
    with contextlib.suppress(ImportError):
        import coverage  # noqa: F401 - imported once for the children that record a spectrum (spectrum.py)
    print(f"PT2BB-FORKSERVER: imported {modules or ['torch']} in {time.perf_counter() - started:.1f}s", flush=True)
    sources = Sources(started_ns, modules or ["torch"]) if watch else None
    serve(argv[0], idle_s=idle_s, parent=parent, sources=sources)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
