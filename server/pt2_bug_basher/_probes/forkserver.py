"""A pre-forked evaluator: imports torch once, then forks one child per script run.

    python forkserver.py SOCKET_PATH [MODULE ...]

Each client connection carries one JSON request line:
    {"script": path, "args": [...], "cwd": dir, "stdout": path, "stderr": path, "timeout": s,
     "path": [extra sys.path entries], "backend": null|name, "dynamic": "keep"|true|false,
     "env": {variables set in the child first}, "bisect_trace": bool}
or {"shutdown": true}. The server forks a child (its own process group) that redirects fds 1
and 2 to the given files and runs the script as __main__ exactly like launcher.py does, and
answers one JSON line: {"exit_code", "signal", "timed_out", "duration_s", "pid"}. A child that
outlives its timeout, or whose client hangs up, is killed with its whole group.

The environment (TORCH_LOGS, TORCHINDUCTOR_* ...) is the server's own: torch reads much of it at
import time, so every request of one server shares it; a request's "env" is only for variables read
at call time (the compiler bisector's TORCH_BISECT_*). Only the main thread ever forks.
Imports nothing from pt2_bug_basher; runs in the interpreter under investigation.
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

HERE = os.path.dirname(os.path.abspath(__file__))


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            target()


def _child(request: dict, closing: list) -> None:
    code = 1
    try:
        os.setpgid(0, 0)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        for sock in closing:
            with contextlib.suppress(OSError):
                sock.close()
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        out = os.open(request["stdout"], flags, 0o644)
        err = os.open(request["stderr"], flags, 0o644)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        os.environ.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
        os.chdir(request.get("cwd") or os.path.dirname(request["script"]))
        import faulthandler

        faulthandler.enable()
        import launcher

        launcher.patch_torch(request.get("backend"), request.get("dynamic", "keep"), mark=False)
        if request.get("bisect_trace"):
            launcher.install_bisect_trace()
        extra = [p for p in request.get("path") or [] if p]
        try:
            sys.path[1:1] = extra
            launcher.run_script(request["script"], list(request.get("args") or []))
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException as exc:  # noqa: BLE001 - printed like the interpreter would
            launcher.print_exception(exc)
            code = 1
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


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        os.unlink(tmp)
    listener.bind(tmp)
    listener.listen(64)
    os.rename(tmp, path)  # the socket appears only once it accepts
    jobs: dict[int, dict] = {}  # pid -> {conn, deadline, started, timed_out}
    pending: dict[socket.socket, bytes] = {}
    running = [True]

    def stop(*_):
        running[0] = False

    signal.signal(signal.SIGTERM, stop)
    print(f"PT2BB-FORKSERVER: ready pid={os.getpid()}", flush=True)
    while running[0] or jobs:
        if not running[0]:
            for pid in list(jobs):
                _kill_group(pid)
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
                chunk = sock.recv(65536)
                if not chunk:
                    pending.pop(sock)
                    sock.close()
                    continue
                pending[sock] += chunk
                if b"\n" not in pending[sock]:
                    continue
                request = json.loads(pending.pop(sock).split(b"\n", 1)[0])
                if request.get("shutdown"):
                    running[0] = False
                    sock.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                closing = [listener, sock, *pending, *(j["conn"] for j in jobs.values())]
                pid = os.fork()
                if pid == 0:
                    _child(request, closing)
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


def main(argv: list[str]) -> int:
    sys.path.insert(0, HERE)
    started = time.perf_counter()
    for name in argv[1:] or ["torch"]:
        __import__(name)
    print(f"PT2BB-FORKSERVER: imported {argv[1:] or ['torch']} in {time.perf_counter() - started:.1f}s", flush=True)
    serve(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
