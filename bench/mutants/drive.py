"""Run kill programs in one interpreter (torch imported once), stopping at the first that fails.

    python drive.py [--coverage DATA] [--all] PROGRAM...

Prints one JSON line per program run: {"program", "outcome": pass|wrong|crash, "error", "traceback"}.
A program reports a wrong result by exiting with WRONG_EXIT; any other exception is a crash.
With --coverage, each program runs under coverage.py in its own context (the program's name).
"""

from __future__ import annotations

import json
import runpy
import sys
import time
import traceback

WRONG_EXIT = 3
COMPILER_PACKAGES = ("_dynamo", "_functorch", "_inductor", "fx", "_decomp", "_refs", "_prims", "_higher_order_ops",
                     "_subclasses", "export", "_export")


def run_one(path: str) -> dict:
    import torch

    torch._dynamo.reset()
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as stop:
        if stop.code in (None, 0):
            return {"outcome": "pass"}
        kind = "wrong" if stop.code == WRONG_EXIT else "crash"
        return {"outcome": kind, "error": f"exit {stop.code}", "traceback": ""}
    except BaseException as err:  # noqa: BLE001 - any failure of the compiled program is the verdict
        return {"outcome": "crash", "error": f"{type(err).__name__}: {str(err)[:300]}",
                "traceback": traceback.format_exc()[-20000:]}
    return {"outcome": "pass"}


def main() -> None:
    args = sys.argv[1:]
    data = None
    stop_at_first = True
    if args[:1] == ["--coverage"]:
        data, args = args[1], args[2:]
    if args[:1] == ["--all"]:
        stop_at_first, args = False, args[1:]
    cov = None
    if data:
        import coverage
        import torch

        root = torch.__file__.rsplit("/", 1)[0]
        cov = coverage.Coverage(data_file=data, include=[f"{root}/{p}/*" for p in COMPILER_PACKAGES])
        cov.load()  # a rerun adds its programs' contexts
        cov.start()
    for path in args:
        if cov is not None:
            cov.switch_context(path.rsplit("/", 1)[-1])
        started = time.monotonic()
        result = {"program": path, **run_one(path), "seconds": round(time.monotonic() - started, 1)}
        print(json.dumps(result), flush=True)
        if stop_at_first and result["outcome"] != "pass":
            break
    if cov is not None:
        cov.stop()
        cov.save()


if __name__ == "__main__":
    main()
