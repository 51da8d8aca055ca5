"""A whole case, replayed through the MCP server over stdio: an older server beside the working tree's.

The case: a bug planted in an Inductor lowering (tests/planted_bugs.py, "inductor_lowering": integer
powers drop the last multiply) of a develop-build torch checkout (tests/torch_checkout.py). The
checkout's `main` is the clean torch sources plus a small topical Inductor test file, with the bug
committed on top; the agent works on a `case` branch from it. A client drives the server the way an
agent would, with exactly these calls:

    check_env -> run_with_logs(repeat=2) -> minify(mode="auto") -> [the agent writes a test] ->
    register_test -> make_worktree(create) -> run_with_logs(logs=<the category's preset>) ->
    classify_error -> collect_debug_artifacts -> [the fix: the planted line undone] ->
    run_tests -> review_changes -> celebrate -> make_worktree(remove)

Any refusal or failed step stops the bench (nothing is skipped). Each version gets its own fresh
checkout and a fresh global Inductor cache directory, so neither starts warm. The older server runs
from a git worktree of --old-commit in its own virtualenv (torch==2.13.0 + the package, editable);
the newer one is this working tree's, run by this interpreter. Both run one after the other in the
same invocation; the figure that counts is the ratio of their server seconds (the sum of the calls).

    python bench/bench_case_replay.py [--old-commit 8de3c65] [--only old|new] [--old-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from planted_bugs import PLANTED, plant, unplant  # noqa: E402
from torch_checkout import build_torch_checkout, git  # noqa: E402

BUG = PLANTED["inductor_lowering"]
DEFAULT_OLD_COMMIT = "8de3c65"
REPRO_NAME = "repro_pow.py"
TEST_FILE = "test/inductor/test_torchinductor.py"
TEST_CLASS = "CpuTests"
TEST_METHOD = "test_pow_odd_integer_exponent"

# The topical test file main already has (a small stand-in for torch's own), before the agent's test.
INDUCTOR_TESTS = '''\
# Owner(s): ["module: inductor"]
"""Inductor lowerings, compiled and compared with eager."""

import torch
from torch.testing._internal.common_utils import TestCase, run_tests


class CpuTests(TestCase):
    def test_add_scalar(self):
        def fn(x):
            return x + 2

        x = torch.randn(8)
        self.assertEqual(torch.compile(fn)(x), fn(x))

    def test_abs_neg(self):
        def fn(x):
            return torch.abs(-x)

        x = torch.randn(8)
        self.assertEqual(torch.compile(fn)(x), fn(x))


if __name__ == "__main__":
    run_tests()
'''

AGENT_TEST = f'''
    def {TEST_METHOD}(self):
        def fn(x):
            return torch.pow(x, 3) + 1

        x = torch.randn(16)
        self.assertEqual(torch.compile(fn)(x), fn(x))
'''

CELEBRATE = {
    "root_cause": "pow_recursive in torch/_inductor/lowering.py skipped the final multiply for odd exponents "
                  "of 3 or less, so x**3 was computed as x**2.",
    "fix_summary": "Restore the odd-exponent condition: multiply by x whenever the exponent is odd.",
}


class ReplayFailed(RuntimeError):
    pass


def prepare_checkout(root: Path) -> tuple[Path, Path]:
    """A torch checkout whose `main` carries the planted lowering bug; HEAD is the agent's `case` branch."""
    built = build_torch_checkout(root)
    checkout = built.checkout
    git(checkout, "checkout", "-q", "-B", "main", "clean")
    test_path = checkout / TEST_FILE
    test_path.parent.mkdir(parents=True, exist_ok=True)
    test_path.write_text(INDUCTOR_TESTS)
    git(checkout, "add", TEST_FILE)
    git(checkout, "commit", "-q", "-m", "Inductor: a few lowering tests")
    plant(checkout, BUG)
    git(checkout, "checkout", "-q", "-b", "case")
    (checkout / REPRO_NAME).write_text(BUG.repro)
    return checkout, built.python


def add_agent_test(checkout: Path) -> None:
    path = checkout / TEST_FILE
    text = path.read_text()
    anchor = "\n\nif __name__"
    path.write_text(text.replace(anchor, AGENT_TEST.rstrip("\n") + "\n" + anchor, 1))


def prepare_old_server(old_dir: Path, commit: str) -> Path:
    """A git worktree of `commit` with its own virtualenv; returns that venv's interpreter."""
    source, env_dir = old_dir / "src", old_dir / "venv"
    python = env_dir / "bin" / "python"
    if python.exists() and (source / "pyproject.toml").exists():
        return python
    old_dir.mkdir(parents=True, exist_ok=True)
    if not source.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(source), commit], cwd=ROOT, check=True,
                       capture_output=True, timeout=300)
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=300)
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0", "-e", f"{source}[test]"],
                         capture_output=True, text=True, timeout=1800)
    if pip.returncode != 0:
        raise ReplayFailed(f"pip could not install the server of {commit}: {pip.stderr[-3000:]}")
    return python


def server_command(version: str, old_python: Path | None, state_dir: Path, checkout: Path) -> tuple[str, list[str]]:
    args = ["-m", "pt2_bug_basher", "serve", "--state-dir", str(state_dir), "--repo", str(checkout)]
    if version == "old":
        assert old_python is not None
        return str(old_python), args
    return sys.executable, args


Call = Callable[..., Awaitable[dict[str, Any]]]


def require(ok: bool, what: str, data: dict[str, Any]) -> None:
    if not ok:
        raise ReplayFailed(f"{what}: {json.dumps(data)[:2000]}")


async def drive(call: Call, checkout: Path, case_python: Path) -> None:
    """The agent's calls, in order; a refusal or a step that does not complete raises ReplayFailed."""
    env_report = await call("check_env", python=str(case_python), repo=str(checkout))
    require(env_report.get("ok") and env_report["torch"]["imported_from_repo"], "check_env", env_report)
    case = {"case_id": env_report["case_id"]}
    repro = await call("run_with_logs", "run_with_logs(repeat=2)", **case, script=REPRO_NAME, repeat=2)
    require(repro.get("reproduced") is True, "the repro did not reproduce", repro)
    category = repro["failure"]["category"]
    minified = await call("minify", **case, mode="auto")
    require("reduce" in (minified.get("recorded") or []), "minify recorded nothing", minified)
    add_agent_test(checkout)
    registered = await call("register_test", **case, test_file=TEST_FILE, test_name=f"{TEST_CLASS}.{TEST_METHOD}")
    require(registered.get("ok") is True, "register_test", registered)
    main_check = await call("make_worktree", "make_worktree(create)", **case, action="create", ref="main")
    require(main_check.get("ok") is True, "the main check", main_check)
    logs = await call("run_with_logs", f"run_with_logs(logs={category})", **case, script=REPRO_NAME, logs=category)
    require("logs" in (logs.get("recorded") or []), "the logs step", logs)
    classified = await call("classify_error", **case, run_id=repro["runs"][0]["run_id"])
    require(bool(classified.get("recorded")), "classify_error", classified)
    artifacts = await call("collect_debug_artifacts", **case, script=REPRO_NAME)
    require("artifacts" in (artifacts.get("recorded") or []), "collect_debug_artifacts", artifacts)
    unplant(checkout, BUG)  # the fix
    verified = await call("run_tests", "run_tests(run_nearby=True)", **case, run_nearby=True)
    require(verified.get("verified") is True, "run_tests", verified)
    reviewed = await call("review_changes", **case)
    require(reviewed.get("ok") is True, "review_changes", reviewed)
    done = await call("celebrate", **case, **CELEBRATE)
    require(bool(done.get("celebration")), "celebrate", done)
    await call("make_worktree", "make_worktree(remove)", **case, action="remove", ref="main")


async def replay(version: str, work: Path, old_python: Path | None) -> dict[str, Any]:
    from mcp import Client, StdioServerParameters

    root = work / version
    root.mkdir(parents=True)
    started = time.monotonic()
    checkout, case_python = await anyio.to_thread.run_sync(prepare_checkout, root)
    setup_s = time.monotonic() - started
    command, args = server_command(version, old_python, root / "state", checkout)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(root / "global-inductor-cache")  # fresh: neither version starts warm
    if version == "new":
        env["PYTHONPATH"] = str(ROOT / "server")
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(checkout))
    calls: list[dict[str, Any]] = []
    failure: ReplayFailed | None = None
    async with Client(params) as client:
        async def call(tool: str, label: str | None = None, **arguments: Any) -> dict[str, Any]:
            t0 = time.monotonic()
            result = await client.call_tool(tool, arguments)
            seconds = time.monotonic() - t0
            calls.append({"tool": label or tool, "seconds": round(seconds, 2)})
            print(f"  [{version}] {label or tool}: {seconds:.1f}s", flush=True)
            if result.is_error:
                text = result.content[0].text if result.content else ""
                raise ReplayFailed(f"{label or tool} refused: {text[:1500]}")
            return result.structured_content or {}

        try:
            await drive(call, checkout, case_python)
        except ReplayFailed as exc:
            failure = exc  # raised outside the client's task group, so it is not wrapped in a group
    if failure is not None:
        raise ReplayFailed(f"{version}: {failure}")
    total = sum(c["seconds"] for c in calls)
    return {"version": version, "calls": calls, "server_s": round(total, 1), "setup_s": round(setup_s, 1),
            "wall_s": round(time.monotonic() - started, 1), "state": str(root / "state")}



def recorded_runs(state_dir: Path) -> list[str]:
    """Every process the server recorded for the case: tool, start (s after the first), seconds, command."""
    import sqlite3

    db = state_dir / "cases.sqlite3"
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT tool, argv_json, env_json, started_at, ended_at FROM runs ORDER BY started_at")
        rows = list(rows)
    if not rows:
        return []
    first = rows[0][3]
    out = []
    for tool, argv_json, env_json, started, ended in rows:
        argv = " ".join(Path(a).name if "/" in a else a for a in json.loads(argv_json))
        env = sorted(set(json.loads(env_json)) - {"PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "TORCHINDUCTOR_CACHE_DIR"})
        seconds = f"{ended - started:7.1f}" if ended else "      -"
        out.append(f"  {tool:<24} +{started - first:7.1f} {seconds}  {argv[:100]}  {','.join(env)}")
    return out


def table(results: dict[str, dict[str, Any]]) -> str:
    versions = list(results)
    rows = [c["tool"] for c in results[versions[0]]["calls"]]
    width = max(len(r) for r in [*rows, "server seconds (sum of calls)"]) + 2
    lines = [f"{'call':<{width}}" + "".join(f"{v:>10}" for v in versions)
             + ("   new/old" if len(versions) == 2 else "")]
    for i, row in enumerate(rows):
        values = [results[v]["calls"][i]["seconds"] for v in versions]
        ratio = f"{values[1] / values[0]:>10.2f}" if len(values) == 2 and values[0] else ""
        lines.append(f"{row:<{width}}" + "".join(f"{x:>10.1f}" for x in values) + ratio)
    totals = [results[v]["server_s"] for v in versions]
    lines.append(f"{'server seconds (sum of calls)':<{width}}" + "".join(f"{x:>10.1f}" for x in totals)
                 + (f"{totals[1] / totals[0]:>10.2f}" if len(totals) == 2 else ""))
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> int:
    versions = [args.only] if args.only else ["old", "new"]
    work = Path(tempfile.mkdtemp(prefix="case-replay-"))
    old_dir = Path(args.old_dir) if args.old_dir else work / "old-server"
    results: dict[str, dict[str, Any]] = {}
    try:
        old_python = None
        if "old" in versions:
            print(f"preparing the server of {args.old_commit} in {old_dir} ...", flush=True)
            old_python = await anyio.to_thread.run_sync(prepare_old_server, old_dir, args.old_commit)
        for version in versions:
            print(f"replaying the case with the {version} server ...", flush=True)
            results[version] = await replay(version, work, old_python)
            if args.runs:
                print("\n".join(recorded_runs(Path(results[version]["state"]))), flush=True)
    except ReplayFailed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            if not args.old_dir and (old_dir / "src").exists():
                subprocess.run(["git", "worktree", "remove", "--force", str(old_dir / "src")], cwd=ROOT,
                               capture_output=True, timeout=300)
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(results))
    if len(results) == 2:
        ratio = results["new"]["server_s"] / results["old"]["server_s"]
        print(f"\nspeed-up {1 / ratio:.2f}x (new/old = {ratio:.2f}; goal <= 0.6)")
    if args.json:
        Path(args.json).write_text(json.dumps({"old_commit": args.old_commit, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-commit", default=DEFAULT_OLD_COMMIT)
    parser.add_argument("--only", choices=["old", "new"], help="replay one version only")
    parser.add_argument("--old-dir", help="keep the old server's worktree and venv here, reused when present")
    parser.add_argument("--keep", action="store_true", help="keep the checkouts and case state")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--runs", action="store_true", help="after each replay, list the processes it recorded")
    sys.exit(anyio.run(main, parser.parse_args()))
