"""The steps a person runs by hand: `localize`, `minify`, `artifacts` and `classify`, on a case.

Each calls the same step function the MCP tool does. With `--case` it continues that case; without,
it opens one (check_env) and does what the step needs first: localize and minify need a reproduction
(two runs that fail the same way), and artifacts, run by hand before a test exists, waives the test
and main-check gates on the record, saying so.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.domain.errors import BugBasherError, InvalidInput
from pt2_bug_basher.domain.names import Step
from pt2_bug_basher.execution.state import AppState

BY_HAND = "collected by hand from the command line (pt2-bug-basher artifacts) before a test was registered"


def add_parsers(sub: Any, server_options: Callable[[argparse.ArgumentParser], None]) -> None:
    def common(parser: argparse.ArgumentParser, script: bool = True) -> None:
        if script:
            parser.add_argument("script", help="the repro script")
        parser.add_argument("--case", help="continue this case (default: open a new one)")
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--conda-env", help="conda env (or virtualenv) name, for a new case")
        group.add_argument("--python", help="interpreter path, for a new case")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        server_options(parser)

    common(sub.add_parser("localize", help="which layer fails: the backend ladder (eager, aot_eager, ..., inductor)"))
    minify = sub.add_parser("minify", help="reduce the repro while it fails the same way")
    common(minify)
    minify.add_argument("--mode", choices=["auto", "fx", "source"], default="auto")
    minify.add_argument("--after", choices=["aot", "dynamo"], default="aot", help="fx mode: where to dump the graph")
    minify.add_argument("--budget", type=float, help="seconds (default 600)")
    artifacts = sub.add_parser("artifacts", help="rerun with TORCH_COMPILE_DEBUG and index graphs, IR and kernels")
    common(artifacts)
    classify = sub.add_parser("classify", help="classify error text: a file, or '-' for standard input")
    classify.add_argument("file", nargs="?", default="-", help="the error output (default: standard input)")
    common(classify, script=False)


def run(args: argparse.Namespace, config: ServerConfig) -> int:
    import anyio

    from pt2_bug_basher.cli.step_reports import format_step_result

    try:
        result = anyio.run(_dispatch, args, config)
    except BugBasherError as exc:
        print(f"pt2-bug-basher: {exc}", file=sys.stderr)
        return 2
    print(result.model_dump_json(indent=2) if args.json else format_step_result(args.command, result))
    return 0


async def _dispatch(args: argparse.Namespace, config: ServerConfig) -> BaseModel:
    state = AppState.open(config)
    await state.recover()
    say = _progress(args)
    if args.command == "classify":
        from pt2_bug_basher.steps.classify import classify_error

        text = sys.stdin.read() if args.file == "-" else _read(args.file)
        return await classify_error(state, case_id=args.case, text=text)
    script = str(Path(args.script).resolve())
    if args.command == "localize":
        from pt2_bug_basher.steps.localize import localize

        case_id = await _case(state, args, script, say, reproduce=True)
        return await localize(state, case_id, script, progress=say)
    if args.command == "minify":
        from pt2_bug_basher.steps.reduce import minify

        case_id = await _case(state, args, script, say, reproduce=True)
        return await minify(state, case_id, script, mode=args.mode, after=args.after, budget_s=args.budget,
                            progress=say)
    from pt2_bug_basher.steps.artifacts import collect_debug_artifacts

    case_id = await _case(state, args, script, say, reproduce=False)
    await _waive_for_artifacts(state, case_id)
    return await collect_debug_artifacts(state, case_id, script, progress=say)


async def _case(state: AppState, args: argparse.Namespace, script: str, say: Callable[[str], Awaitable[None]],
                *, reproduce: bool) -> str:
    """The case to work on: --case, or a new one (with its reproduction when the step needs one)."""
    from pt2_bug_basher.steps.environment import check_env

    if args.case:
        state.store.get_case(args.case)
        return str(args.case)
    await say("checking the environment")
    env = await check_env(state, conda_env=args.conda_env, python=args.python)
    if not env.ok or env.case_id is None:
        raise InvalidInput(f"torch does not import in {env.python}: {env.import_error}. Pass --python or --conda-env.")
    if reproduce:
        from pt2_bug_basher.steps.reproduce import run_with_logs

        await say("reproducing: running the script twice")
        repro = await run_with_logs(state, env.case_id, script, repeat=2, progress=say)
        if not repro.reproduced:
            raise InvalidInput(f"{script} did not fail the same way twice (case {env.case_id}): {repro.next_step}")
    return env.case_id


async def _waive_for_artifacts(state: AppState, case_id: str) -> None:
    """By hand, artifacts come before a test exists: the test and main-check gates are waived on the record."""
    from pt2_bug_basher.case.workflow import waive

    flow = state.workflow(case_id)
    for step in (Step.test, Step.main_check):
        if not flow.is_complete(step):
            waive(state.store, case_id, step.value, BY_HAND)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc


def _progress(args: argparse.Namespace) -> Callable[[str], Awaitable[None]]:
    live = sys.stderr.isatty() and not args.json

    async def say(message: str) -> None:
        if live:
            print(f"… {message}", file=sys.stderr)

    return say
