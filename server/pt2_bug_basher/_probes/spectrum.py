"""Run a script under coverage.py, recording which lines of torch's compiler packages ran.

    python spectrum.py --out FILE.json [--coverage-path DIR] -- script.py [args...]

The script (often launcher.py, which then runs the repro) runs as `__main__` exactly as it would
alone; its exit status and traceback are its own. On exit, FILE.json holds
{"torch": "<torch's parent folder>", "lines": {"torch/_dynamo/x.py": [lines that ran], ...}}.
`--coverage-path` is appended to sys.path (last: an interpreter's own coverage wins) for an
interpreter that lacks coverage. Runs in the interpreter under investigation; imports nothing
from pt2_bug_basher. Also run in children of the fork server.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

# torch's compiler: the packages whose lines make a run's spectrum (fx includes symbolic shapes)
PACKAGES = ("_dynamo", "_functorch", "_inductor", "fx", "_decomp", "_refs", "_prims", "_higher_order_ops",
            "_subclasses", "export", "_export")


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


def _save(cov, parent: str, out: str) -> None:
    cov.stop()
    data = cov.get_data()
    lines: dict[str, list[int]] = {}
    for path in data.measured_files():
        found = data.lines(path)
        if found and path.endswith(".py") and os.path.isfile(path):  # not code torch generated under a made-up name
            lines[os.path.relpath(path, parent).replace(os.sep, "/")] = sorted(found)
    tmp = out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"torch": parent, "lines": lines}, fh)
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
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] in ("--out", "--coverage-path") and i + 1 < len(argv):
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
        print("spectrum: spectrum.py --out FILE [--coverage-path DIR] -- script.py [args]", file=sys.stderr)
        return 2
    import launcher  # same folder (sys.path[0], or the fork server's): runs a script as __main__

    cov, parent = _start(extra)
    code = 0
    try:
        launcher.run_script(rest[0], rest[1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # noqa: BLE001 - reported like the interpreter would
        _print_exception(exc)
        code = 1
    finally:
        if cov is not None and parent is not None:
            try:
                _save(cov, parent, out)
            except Exception as exc:  # noqa: BLE001 - the run's own outcome matters more than its spectrum
                print(f"spectrum: could not save coverage: {exc}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
