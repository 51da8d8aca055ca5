"""Warm interpreters: a case's runs forked from an interpreter that imported torch once.

A run of `python script.py ...`, `python -m pytest ...` or `python -c ...` with the case's interpreter
may be served by a fork server (`_probes/forkserver.py`) that was started with exactly the run's
environment and has imported torch, Dynamo and Inductor: the run is a child forked from it, a
separate process with its own pid and process group, its stdout and stderr piped to this server as
any run's are. The child is made to look like a new interpreter (sys.path, argv, stdin, reseeded
random generators, threads joined at exit); what it shares with its siblings is what the imports
left in memory, including the string hash seed. The run record says so: its argv starts with
`<child forked from run-...>`, the warm interpreter's own recorded run.

A warm interpreter is used only when all of these hold, otherwise the run is a fresh process:
  - the case's torch cannot use CUDA (the environment probe said so), the platform can fork and pass
    file descriptors, and the interpreter has not initialised CUDA (it checks before every fork);
  - the environment is the one the interpreter started with, but for a PYTHONPATH entry the caller marks
    as appendable (the pytest report plugin's folder) and for Dynamo/Inductor variables (TORCHDYNAMO_*,
    TORCHINDUCTOR_*, TORCH_COMPILE_*) that its imports did not read (it records the names they look up;
    TORCHDYNAMO_DISABLE, read when torch.compile is called, is one): the child sets those itself; and
    for TORCH_LOGS and its companions, which the child sets before configuring torch's logging again
    (`torch._logging._internal._init_logs`, what torch's import ran);
  - the script, or the test files and their conftest.py files, and the modules beside them that they
    import, neither write the environment (a write before `import torch` would have changed what the
    import read) nor mention CUDA;
  - no source file of what the interpreter imported (every imported module's file and every .py file
    of torch, the files torch's compile-cache key hashes) changed since it started: after a fix to
    torch's sources it refuses, stops, and the next run starts a new one.

At most MAX_SERVERS of them run at once in this process (the least recently used is stopped first).
One exits after IDLE_S without a request, when this server's process is gone (or exits: `stop_all`), or
when the worktree it imports from is removed (`stop_using`). It outlives a client's connection: an
in-process client's connection is a lifespan of its own, and a run a minute later is served warm.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import io
import os
import re
import socket
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from pt2_bug_basher.case.store import CaseRecord, Store, new_id
from pt2_bug_basher.execution.runner import ForkRefused, Service, start_service

FORKSERVER = Path(__file__).resolve().parents[1] / "_probes" / "forkserver.py"
WARM_MODULES = ("torch", "torch._dynamo", "torch._inductor.compile_fx")
_WARM_PACKAGES = {name.split(".")[0] for name in WARM_MODULES}
IDLE_S = 600.0
START_TIMEOUT_S = 300.0
MAX_SERVERS = 3
RETRY_AFTER_FAILURE_S = 300.0
# Variables a child may set itself when the warm interpreter's imports did not read them (it checks).
LAZY_PREFIXES = ("TORCHDYNAMO_", "TORCHINDUCTOR_", "TORCH_COMPILE_")
# torch's logging variables: read at import, but a child configures torch's logging again from them.
LOGGING_VARS = frozenset({"TORCH_LOGS", "TORCH_LOGS_OUT", "TORCH_LOGS_FORMAT", "TORCH_LOGS_TRACE_ID_FILTER"})
_CUDA = re.compile(r"""\bcuda\b|type\s*=\s*['"]cuda['"]""")
_ENV_WRITE = re.compile(r"\benviron\s*\[[^\]]*\]\s*=[^=]|\benviron\s*\|="
                        r"|\benviron\s*\.\s*(update|setdefault|pop|popitem|clear)\b"
                        r"|\bputenv\b|\bunsetenv\b|\bdel\s+[\w.]*environ\b")


def set_in_child(name: str) -> bool:
    """A variable a run may set in its child instead of needing an interpreter started with it."""
    return name.startswith(LAZY_PREFIXES) or name in LOGGING_VARS


@dataclass
class WarmRequest:
    """How a run asks for a warm interpreter: `append_path`, trailing PYTHONPATH entries that may go last on
    sys.path in the child instead (they shadow nothing), so runs that differ only in them share one;
    `start`: start one when none runs or is starting (else such a run is a new process)."""

    append_path: tuple[str, ...] = ()
    start: bool = True


@dataclass
class Plan:
    """What the child runs (one of script, module, code) and the key of the interpreter it forks from."""

    key: tuple
    start_env: dict[str, str]
    """the run's environment, without the appendable PYTHONPATH entries"""
    request: dict
    files: list[Path] = field(default_factory=list)

    def request_for(self, server: WarmServer) -> dict:
        """The request, with the variables set in the child that the run sets differently from the server."""
        changes = {name: self.start_env.get(name) for name in {*self.start_env, *server.start_env}
                   if set_in_child(name) and self.start_env.get(name) != server.start_env.get(name)}
        if not changes:
            return self.request
        return {**self.request, "env": {**changes, **self.request.get("env", {})}}


@dataclass
class WarmServer:
    key: tuple
    store: Store
    case_id: str
    start_env: dict[str, str]
    run_id: str
    socket_path: Path
    service: Service
    last_used: float
    forked: int = 0
    finished: bool = False


_SERVERS: dict[tuple, WarmServer] = {}
_LOCKS: dict[tuple, anyio.Lock] = {}
_FAILED: dict[tuple, float] = {}


def code_without_comments(code: str) -> str:
    """The code with its comments left out (a launcher's header says "torch cuda version: None")."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type != tokenize.COMMENT]
        return tokenize.untokenize(tokens)
    except (tokenize.TokenError, SyntaxError, ValueError):
        return "\n".join(line.split("#", 1)[0] for line in code.splitlines())


def unsafe_source(code: str) -> str | None:
    """Why code must not run in a forked child (it writes the environment or uses CUDA), else None."""
    text = code_without_comments(code)
    if _ENV_WRITE.search(text):
        return "it writes the environment"
    if _CUDA.search(text):
        return "it mentions CUDA"
    return None


def platform_can_fork() -> bool:
    return hasattr(os, "fork") and hasattr(socket, "send_fds") and hasattr(socket, "AF_UNIX")


def case_without_cuda(case: CaseRecord) -> bool:
    torch = case.env.get("torch") or {}
    return torch.get("cuda_available") is False and not torch.get("gpus")


def _test_files(args: list[str], cwd: Path) -> list[Path]:
    """The .py files a pytest command line names, and the conftest.py files above them up to cwd."""
    found: list[Path] = []
    for arg in args:
        if arg.startswith("-"):
            continue
        part = arg.split("::", 1)[0]
        if not part.endswith(".py"):
            continue
        path = Path(part) if Path(part).is_absolute() else cwd / part
        found.append(path)
        folder = path.parent
        while True:
            found.append(folder / "conftest.py")
            if folder == cwd or cwd not in folder.parents or folder.parent == folder:
                break
            folder = folder.parent
    return list(dict.fromkeys(found))


def _local_imports(files: list[Path], limit: int = 64) -> list[Path]:
    """The files, and the modules they import (absolute imports, recursively) that sit beside the importing
    file: a helper module that writes the environment before importing torch is read as the script is."""
    found = list(dict.fromkeys(files))
    queue = list(found)
    while queue and len(found) < limit:
        path = queue.pop(0)
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except (OSError, SyntaxError, ValueError):
            continue
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level]
        for name in names:
            top = name.split(".")[0]
            if top in _WARM_PACKAGES:  # imported by the warm interpreter itself, the same way
                continue
            for candidate in (path.parent / f"{top}.py", path.parent / top / "__init__.py"):
                if candidate.is_file() and candidate not in found:
                    found.append(candidate)
                    queue.append(candidate)
    return found


def plan(case: CaseRecord, argv: list[str], cwd: Path, environ: dict[str, str],
         warm: WarmRequest) -> Plan | None:
    """How argv would run in a warm interpreter, or None when it must be a fresh process."""
    if not platform_can_fork() or not case_without_cuda(case) or len(argv) < 2 or argv[0] != case.python:
        return None
    request: dict = {"cwd": str(cwd)}
    files: list[Path] = []
    first = argv[1]
    if first == "-m" and len(argv) >= 3 and argv[2] == "pytest":
        request.update(module="pytest", args=argv[3:], script=str(cwd / "-m"))
        files = _test_files(argv[3:], cwd)
    elif first == "-c" and len(argv) >= 3:
        request.update(code=argv[2], args=argv[3:], script=str(cwd / "-c"))
    elif first.endswith(".py") and not first.startswith("-") and Path(first).is_absolute():
        request.update(script=first, args=argv[2:])
        # the script, and a script it runs (launcher.py/with_config.py -- script.py)
        files = [Path(first), *(Path(a) for a in argv[2:] if a.endswith(".py") and Path(a).is_absolute())]
    else:
        return None
    sources = [request["code"]] if "code" in request else []
    for path in _local_imports(files):
        try:
            sources.append(path.read_text(errors="replace"))
        except FileNotFoundError:
            continue
        except OSError:
            return None
    if any(unsafe_source(code) for code in sources):
        return None
    start_env = dict(environ)
    pythonpath = [p for p in start_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    appended: list[str] = []
    while pythonpath and pythonpath[-1] in warm.append_path:
        appended.insert(0, pythonpath.pop())
    if appended:
        if pythonpath:
            start_env["PYTHONPATH"] = os.pathsep.join(pythonpath)
        else:
            start_env.pop("PYTHONPATH", None)
        request["append_path"] = appended
        request["env"] = {"PYTHONPATH": environ["PYTHONPATH"]}
    shared = sorted((k, v) for k, v in start_env.items() if not set_in_child(k))
    key = (case.case_id, case.python, tuple(shared))
    return Plan(key=key, start_env=start_env, request=request, files=files)


STOPPED = "stopped"  # the status of a warm interpreter's run that the server stopped (at exit, idle or replaced)


def _socket_path() -> Path:
    # AF_UNIX paths are limited to ~100 bytes: keep the name short.
    return Path("/tmp") / f"pt2bb-warm-{os.getpid()}-{time.monotonic_ns() % 10**9}.sock"


def _finish(server: WarmServer) -> None:
    """Stop the interpreter and close its recorded run (once)."""
    if server.finished:
        return
    server.finished = True
    ended = server.service.exit_code()  # before the stop: it idled out or died on its own
    server.service.stop()
    code = server.service.exit_code()
    with contextlib.suppress(Exception):  # at exit the store may be gone; the process is stopped either way
        if ended is None:  # stopped by this server: no failure of the interpreter's
            server.store.finish_run(server.run_id, STOPPED, None, None, {"warm_interpreter": True})
        else:
            signal_name = None if code is None or code >= 0 else f"signal {-code}"
            server.store.finish_run(server.run_id, "finished", code if code is not None and code >= 0 else None,
                                    signal_name, {"warm_interpreter": True})
    with contextlib.suppress(OSError):
        server.socket_path.unlink(missing_ok=True)


def _forget(key: tuple) -> None:
    server = _SERVERS.pop(key, None)
    if server is not None:
        _finish(server)


async def _start(store: Store, case: CaseRecord, the_plan: Plan, tool: str, env_add: dict[str, str]) -> WarmServer:
    run_id = new_id("run")
    run_dir = store.case_dir(case.case_id) / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    socket_path = _socket_path()
    argv = [case.python, str(FORKSERVER), str(socket_path), *WARM_MODULES, "--watch", "--idle", str(IDLE_S),
            "--parent", str(os.getpid())]
    stdout, stderr = run_dir / "stdout.log", run_dir / "stderr.log"
    store.start_run(case.case_id, tool, argv, str(store.case_dir(case.case_id)), env_add, str(stdout), str(stderr),
                    os.getpid(), run_id=run_id)
    try:
        service = start_service(argv, cwd=store.case_dir(case.case_id), env=the_plan.start_env, stdout_path=stdout,
                                stderr_path=stderr)
    except OSError:
        store.finish_run(run_id, "finished", None, None)
        raise
    store.set_run_pid(run_id, service.pid)
    server = WarmServer(the_plan.key, store, case.case_id, dict(the_plan.start_env), run_id, socket_path, service,
                        time.monotonic())
    deadline = time.monotonic() + START_TIMEOUT_S
    while not socket_path.exists():
        if service.exit_code() is not None or time.monotonic() > deadline:
            _finish(server)
            raise OSError(f"the warm interpreter did not start (run {run_id})")
        await anyio.sleep(0.05)
    return server


def _sweep() -> None:
    """Every interpreter that idled out or died is forgotten: reaped, and its recorded run closed, whichever
    case it served (a long-lived server would otherwise keep one zombie and one open run per old case)."""
    for key, server in list(_SERVERS.items()):
        if server.service.exit_code() is not None:
            _forget(key)


async def acquire(store: Store, case: CaseRecord, the_plan: Plan, tool: str, env_add: dict[str, str],
                  start: bool = True) -> WarmServer | None:
    """The warm interpreter for the plan's key, started if needed (and `start`); None when none can be had."""
    key = the_plan.key
    _sweep()
    if time.monotonic() - _FAILED.get(key, -RETRY_AFTER_FAILURE_S) < RETRY_AFTER_FAILURE_S:
        return None
    lock = _LOCKS.setdefault(key, anyio.Lock())
    if not start and key not in _SERVERS and not lock.locked():
        return None
    async with lock:
        server = _SERVERS.get(key)
        if server is not None and server.service.exit_code() is not None:
            _forget(key)  # it idled out or died
            server = None
        if server is None and not start:
            return None
        if server is None:
            while len(_SERVERS) >= MAX_SERVERS:
                oldest = min(_SERVERS, key=lambda k: _SERVERS[k].last_used)
                await anyio.to_thread.run_sync(_forget, oldest)
            try:
                server = await _start(store, case, the_plan, tool, env_add)
            except OSError:
                _FAILED[key] = time.monotonic()
                return None
            _SERVERS[key] = server
        server.last_used = time.monotonic()
        return server


def refused(server: WarmServer, refusal: ForkRefused) -> None:
    """A server that refused to fork is stopped. One whose sources changed after it served runs is simply
    replaced at the next run; one that refused before serving any is not started again for a while."""
    if _SERVERS.get(server.key) is server:
        _forget(server.key)
    else:
        _finish(server)
    if not refusal.stale or server.forked == 0:
        _FAILED[server.key] = time.monotonic()


def stop_all(store: Store | None = None) -> None:
    """Stop the warm interpreters of this process (those of one store's cases, given a store) and close
    their recorded runs."""
    for key, server in list(_SERVERS.items()):
        if store is None or server.store is store:
            _forget(key)


def stop_using(path: Path) -> None:
    """Stop the warm interpreters that import from `path` (first on their PYTHONPATH): a removed worktree."""
    for key in list(_SERVERS):
        env = dict(key[2])
        first = env.get("PYTHONPATH", "").split(os.pathsep)[0]
        if first and Path(first) == path:
            _forget(key)


atexit.register(stop_all)
