"""Re-create the stored logs in this folder (see README.md).

Run from the repository root with the interpreter that has torch:

    python tests/data/logs/capture.py            # all logs
    python tests/data/logs/capture.py NAME ...   # only these (file names without .log)

Each log is the captured stderr (or stderr+stdout where noted) of one script run under one
TORCH_LOGS setting.  Paths that depend on the machine are rewritten so the files are the same
wherever they are captured: the checkout root becomes /src/pt2-bug-basher, the Python
installation prefix becomes /usr, and Inductor's cache dir /tmp/torchinductor_<user> becomes
/tmp/torchinductor_user.  Timestamps and process ids are left as printed.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
MAX_BYTES = 300_000

# TORCH_LOGS_FORMAT for the captures that check the parser without torch's line prefix
MESSAGE_ONLY = {"TORCH_LOGS_FORMAT": "%(message)s"}

# name -> (script, TORCH_LOGS or None, also capture stdout interleaved[, extra environment])
LOGS: dict[str, tuple] = {
    "graph_breaks.graph_break_logs_only": ("examples/graph_break_logs_only.py", "graph_breaks", False),
    "graph_breaks.graph_break_logs_only.combined": ("examples/graph_break_logs_only.py", "graph_breaks", True),
    "graph_breaks.graph_break_variety": ("tests/data/logs/graph_break_variety.py", "graph_breaks", False),
    "graph_breaks.graph_break_variety.message_only": (
        "tests/data/logs/graph_break_variety.py", "graph_breaks", True, MESSAGE_ONLY),
    "graph_code.graph_break_logs_only": ("examples/graph_break_logs_only.py", "graph_code", False),
    "dynamo_info.graph_break_logs_only": ("examples/graph_break_logs_only.py", "dynamo", False),
    "dynamo_debug.graph_break_logs_only": ("examples/graph_break_logs_only.py", "+dynamo", False),
    "recompiles.recompile_reasons": ("tests/data/logs/recompile_reasons.py", "recompiles", False),
    "recompiles_verbose_guards.recompile_reasons": (
        "tests/data/logs/recompile_reasons.py", "recompiles,recompiles_verbose,guards", False),
    "recompiles_verbose.recompile_reasons.message_only": (
        "tests/data/logs/recompile_reasons.py", "recompiles_verbose", False, MESSAGE_ONLY),
    "dynamo_debug.recompile_reasons": ("tests/data/logs/recompile_reasons.py", "+dynamo", False),
    "recompiles.recompile_limit": ("examples/recompile_limit.py", "recompiles", False),
    "stderr.graph_break_fullgraph": ("examples/graph_break_fullgraph.py", None, False),
    "stderr.export_failure": ("examples/export_failure.py", None, False),
    "stderr.dynamo_internal": ("examples/dynamo_internal.py", None, False),
    "stderr.runtime_error": ("examples/runtime_error.py", None, False),
    "stderr.backend_compiler_failed": ("examples/backend_compiler_failed.py", None, False),
}


def normalise(text: str) -> str:
    text = text.replace(str(ROOT), "/src/pt2-bug-basher")
    for prefix in sorted({sys.base_prefix, os.path.realpath(sys.base_prefix)}, key=len, reverse=True):
        if prefix and prefix not in ("/", "/usr"):
            text = text.replace(prefix, "/usr")
    return text.replace(f"torchinductor_{getpass.getuser()}", "torchinductor_user")


def trim(text: str) -> str:
    """Keep the start and the end of an oversized log, marking the cut."""
    data = text.encode()
    if len(data) <= MAX_BYTES:
        return text
    head = data[: MAX_BYTES // 2].decode(errors="ignore").rsplit("\n", 1)[0]
    tail = data[-MAX_BYTES // 2 :].decode(errors="ignore").split("\n", 1)[1]
    return f"{head}\n[... {len(data) - len(head) - len(tail)} bytes trimmed ...]\n{tail}"


def capture(name: str) -> None:
    script, spec, combined, *extra = LOGS[name]
    env = dict(os.environ)
    for var in ("TORCH_LOGS", "TORCH_LOGS_FORMAT", "TORCH_LOGS_OUT", "TORCHDYNAMO_VERBOSE", "TORCH_TRACE"):
        env.pop(var, None)
    env.update(extra[0] if extra else {})
    if spec:
        env["TORCH_LOGS"] = spec
    if combined:
        env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run(
        [sys.executable, script], cwd=ROOT, env=env, text=True, timeout=300,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT if combined else subprocess.PIPE,
    )
    out = proc.stdout if combined else proc.stderr
    (HERE / f"{name}.log").write_text(trim(normalise(out)))
    print(f"{name}.log: exit {proc.returncode}, {len(out)} chars")


if __name__ == "__main__":
    for n in sys.argv[1:] or list(LOGS):
        capture(n)
