"""Run a PyTorch minifier launcher (minifier_launcher.py / repro.py) with the server's changes.

    python fx_driver.py --launcher PATH --status FILE [--forkserver SOCK] [--check-str S]
                        [--backend-source SCRIPT] -- COMMAND [launcher args...]

What changes, compared with `python minifier_launcher.py minify`:

* isolated trials (after_aot's `isolate_fails`) run as children of a fork server that has torch
  and Inductor imported already, instead of a new interpreter each (same file, same command,
  same environment); their output is kept per trial, and shown with the ">>  " prefix as before;
* after_dynamo's trials (`backend_fails`, in process) also require the check string, so the
  minifier cannot drift to another error (after_aot takes `--check-str` itself);
* a custom backend that the launcher names but cannot find (InvalidBackend) is registered from
  the user's script (`--backend-source`), imported as a module, not run as __main__;
* progress (strategy, node counts, trials) goes to the status file as JSON lines.

Imports nothing from pt2_bug_basher; runs in the interpreter under investigation.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_INTERESTING = re.compile(r"^(Started off with|Strategy:|SUCCESS:|FAIL:|Trying granularity|Made \d+ queries|"
                          r"Wrote minimal repro|WARNING: Something went wrong)")
_CHECKPOINT = re.compile(r"Writing checkpoint with (\d+) nodes")


class Status:
    def __init__(self, path: str) -> None:
        self.path = path
        self.trials = 0
        self.started = time.monotonic()

    def write(self, **event) -> None:
        event["t"] = round(time.monotonic() - self.started, 2)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(event) + "\n")


class Tee:
    """Passes writes through and reports the minifier's own progress lines."""

    def __init__(self, stream, status: Status) -> None:
        self.stream, self.status, self.buf = stream, status, ""

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.buf += text
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            line = line.strip()
            if _INTERESTING.match(line):
                self.status.write(kind="minifier", line=line[:300])
            m = _CHECKPOINT.search(line)
            if m:
                self.status.write(kind="checkpoint", nodes=int(m.group(1)))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _ask(socket_path: str, request: dict) -> dict:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(socket_path)
        sock.sendall((json.dumps(request) + "\n").encode())
        buf = b""
        while b"\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the fork server closed the connection")
            buf += chunk
    return json.loads(buf.split(b"\n", 1)[0])


def patch_isolation(socket_path: str | None, status: Status, timeout_s: float) -> None:
    import textwrap
    import uuid

    from torch._dynamo.repro import after_aot

    def isolate_fails(fx_g, args, compiler_name, env=None, save_dir=None, accuracy=None, tracing_mode=None,
                      check_str=None):
        subdir = os.path.join(os.getcwd(), "isolate")
        os.makedirs(subdir, exist_ok=True)
        stem = str(uuid.uuid4())[:8]
        file_name = os.path.join(subdir, f"{stem}.py")
        with open(file_name, "w") as fd:
            after_aot.save_graph_repro(fd, fx_g, args, compiler_name, save_dir=save_dir, command="minifier-query",
                                       accuracy=accuracy, tracing_mode=tracing_mode, check_str=check_str)
        out, err = os.path.join(subdir, f"{stem}.out"), os.path.join(subdir, f"{stem}.err")
        started = time.monotonic()
        if socket_path:
            reply = _ask(socket_path, {"script": file_name, "args": [], "cwd": subdir, "stdout": out,
                                       "stderr": err, "timeout": timeout_s})
            code = reply["exit_code"] if not reply["timed_out"] else 124
        else:
            import subprocess

            with open(out, "wb") as o, open(err, "wb") as e:
                try:
                    code = subprocess.run([sys.executable, file_name], cwd=subdir, stdout=o, stderr=e,
                                          env={**os.environ, **(env or {})}, timeout=timeout_s).returncode
                except subprocess.TimeoutExpired:
                    code = 124
        for path, stream in ((out, sys.stdout), (err, sys.stderr)):
            with open(path, errors="replace") as fh:
                print(textwrap.indent(fh.read(), prefix=">>  "), file=stream)
        status.trials += 1
        status.write(kind="trial", n=status.trials, fails=code != 0, exit=code,
                     seconds=round(time.monotonic() - started, 2), stderr=err, nodes=len(fx_g.graph.nodes))
        return code != 0

    after_aot.isolate_fails = isolate_fails


def patch_dynamo_check(check_str: str | None) -> None:
    if not check_str:
        return
    from torch._dynamo.repro import after_dynamo

    def backend_fails(gm, example_inputs, compiler_fn, orig_failure):
        try:
            after_dynamo.run_fwd_maybe_bwd(gm, after_dynamo.clone_inputs_retaining_gradness(example_inputs))
            compiled_gm = compiler_fn(gm, example_inputs)
            after_dynamo.run_fwd_maybe_bwd(compiled_gm,
                                           after_dynamo.clone_inputs_retaining_gradness(example_inputs))
        except Exception as e:  # noqa: BLE001 - the verdict is the point
            return check_str in str(e) or check_str in repr(e)
        return False

    after_dynamo.backend_fails = backend_fails


def register_backend_from(script: str | None, launcher_text: str, status: Status) -> None:
    m = re.search(r"backend=(['\"])([^'\"]+)\1", launcher_text)
    if not m or not script:
        return
    name = m.group(2)
    from torch._dynamo.backends.registry import lookup_backend, register_backend

    try:
        lookup_backend(name)
        return
    except Exception:  # noqa: BLE001 - InvalidBackend: find it in the user's script
        pass
    import runpy

    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    namespace = runpy.run_path(script, run_name="__pt2bb_backend_source__")
    found = namespace.get(name)
    if callable(found):
        register_backend(found, name=name)
        status.write(kind="note", line=f"registered the custom backend {name!r} from {os.path.basename(script)}")
    else:
        status.write(kind="note", line=f"backend {name!r} is not defined at module level of {script}")


def main(argv: list[str]) -> int:
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i] != "--":
        opts[argv[i].lstrip("-")] = argv[i + 1]
        i += 2
    rest = argv[i + 1:]
    status = Status(opts["status"])
    launcher = os.path.abspath(opts["launcher"])
    sys.stderr = Tee(sys.stderr, status)
    import torch  # noqa: F401

    patch_isolation(opts.get("forkserver"), status, float(opts.get("trial-timeout", "600")))
    patch_dynamo_check(opts.get("check-str"))
    with open(launcher) as fh:
        text = fh.read()
    register_backend_from(opts.get("backend-source"), text, status)
    sys.argv = [launcher, *rest]
    sys.path[0] = os.path.dirname(launcher)
    status.write(kind="start", command=rest[:1])
    code = compile(text, launcher, "exec")
    try:
        exec(code, {"__name__": "__main__", "__file__": launcher, "__builtins__": __builtins__})
    except SystemExit as exc:
        status.write(kind="end", exit=exc.code if isinstance(exc.code, int) else 1)
        raise
    except BaseException as exc:
        status.write(kind="error", type=type(exc).__name__, message=str(exc)[:2000])
        raise
    status.write(kind="end", exit=0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
