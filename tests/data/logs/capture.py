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
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
MAX_BYTES = 300_000
CHECKOUT_ROOT = "/src/torch-checkout"

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
    "guards_recompiles.list_sum": ("tests/data/logs/list_sum.py", "guards,recompiles", False),
    "guards_recompiles.guard_variety": ("tests/data/logs/guard_variety.py", "guards,recompiles", False),
}

# name -> (script, TORCH_LOGS, planted bug): run with the interpreter of a torch checkout
# (tests/torch_checkout.py) that has the bug of tests/planted_bugs.py planted
PLANTED_LOGS: dict[str, tuple[str, str, str]] = {
    "guards_recompiles.list_sum.planted": ("tests/data/logs/list_sum.py", "guards,recompiles", "dynamo_guard"),
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


def write_list_sum() -> None:
    """list_sum.py is the dynamo_guard recipe's repro (tests/planted_bugs.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from planted_bugs import PLANTED

    (HERE / "list_sum.py").write_text(PLANTED["dynamo_guard"].repro)


def capture_planted(name: str) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from planted_bugs import PLANTED, plant
    from torch_checkout import build_torch_checkout

    script, spec, bug = PLANTED_LOGS[name]
    with tempfile.TemporaryDirectory() as tmp:
        checkout = build_torch_checkout(Path(tmp))
        plant(checkout.checkout, PLANTED[bug])
        capture(name, python=str(checkout.python), spec=spec, script=script,
                rename={str(checkout.checkout): CHECKOUT_ROOT})


def capture(name: str, python: str = sys.executable, spec: str | None = None, script: str | None = None,
            rename: dict[str, str] | None = None) -> None:
    if name in LOGS:
        script, spec, combined, *extra = LOGS[name]
    else:
        combined, extra = False, []
    assert script is not None
    env = dict(os.environ)
    for var in ("TORCH_LOGS", "TORCH_LOGS_FORMAT", "TORCH_LOGS_OUT", "TORCHDYNAMO_VERBOSE", "TORCH_TRACE"):
        env.pop(var, None)
    env.update(extra[0] if extra else {})
    if spec:
        env["TORCH_LOGS"] = spec
    if combined:
        env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run(
        [python, script], cwd=ROOT, env=env, text=True, timeout=300,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT if combined else subprocess.PIPE,
    )
    out = proc.stdout if combined else proc.stderr
    for old, new in (rename or {}).items():
        out = out.replace(old, new)
    (HERE / f"{name}.log").write_text(trim(normalise(out)))
    print(f"{name}.log: exit {proc.returncode}, {len(out)} chars")


if __name__ == "__main__":
    write_list_sum()
    for n in sys.argv[1:] or [*LOGS, *PLANTED_LOGS]:
        if n in PLANTED_LOGS:
            capture_planted(n)
        else:
            capture(n)
