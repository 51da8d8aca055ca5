"""The command line: serve, check-env, triage, call, tools, localize, minify, artifacts, classify, report, cases,
install-skill."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from pt2_bug_basher import __version__
from pt2_bug_basher.domain.names import CLOSED

DEFAULT_SKILL_DEST = Path.home() / ".claude" / "skills" / "pt2-bug-basher"


def _server_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", help="case store directory (default: REPO/.pt2-bug-basher)")
    parser.add_argument("--repo", help="repository being fixed (default: the current directory)")
    parser.add_argument("--root", action="append", default=[], help="another directory tools may touch (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pt2-bug-basher", description="Debug PyTorch 2 compiler failures.")
    parser.add_argument("--version", action="version", version=f"pt2-bug-basher {__version__}")
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (loopback by default)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--auth-token", help="bearer token HTTP clients must send (required off loopback; "
                                            "or set PT2_BUG_BASHER_AUTH_TOKEN)")
    _server_options(serve)

    env = sub.add_parser("check-env", help="check the environment and print the report")
    group = env.add_mutually_exclusive_group()
    group.add_argument("--conda-env", help="conda env (or virtualenv) name")
    group.add_argument("--python", help="interpreter path")
    env.add_argument("--json", action="store_true", help="print the report as JSON")
    _server_options(env)

    triage = sub.add_parser("triage", help="check the env, reproduce twice, classify, collect logs; print a report")
    triage.add_argument("script", help="the repro script")
    group = triage.add_mutually_exclusive_group()
    group.add_argument("--conda-env", help="conda env (or virtualenv) name")
    group.add_argument("--python", help="interpreter path")
    triage.add_argument("--timeout", type=float, default=600.0, help="seconds per run (default 600)")
    triage.add_argument("--json", action="store_true", help="print the report as JSON")
    _server_options(triage)

    call = sub.add_parser("call", help="call any tool through the server and print its result as JSON",
                          description="Call one tool through the real server code (in-process) and print its "
                                      "structured result as JSON. Exit 1 when the tool refuses (its message on "
                                      "stderr), 2 for an unknown tool or arguments that are not a JSON object.")
    call.add_argument("tool", help="the tool's name, e.g. get_workflow")
    call.add_argument("arguments", nargs="?", default="{}", help="the arguments as one JSON object (default {})")
    _server_options(call)

    tools = sub.add_parser("tools", help="list the server's tools, one line each (--json: the whole tools/list)",
                           description="List the tools the server offers, as an agent's tools/list gets them: "
                                       "each name with the first sentence of its description; --json prints the "
                                       "full listing (descriptions, input and output schemas).")
    tools.add_argument("--json", action="store_true", help="print the full tools/list result as JSON")
    _server_options(tools)

    read = sub.add_parser("read", help="print a resource the tools name (case://..., skill://...)",
                          description="Read one resource through the real server (resources/read), e.g. a run's "
                                      "stderr or a debug artifact that a result names as case://<case_id>/..., "
                                      "and print its text. Exit 1 when the server cannot read it.")
    read.add_argument("uri", help="the resource's URI, e.g. case://<case_id>/runs/<run_id>/stderr")
    _server_options(read)

    from pt2_bug_basher.cli.commands import add_parsers

    add_parsers(sub, _server_options)

    report = sub.add_parser("report", help="show a case: steps, runs, classification, tests, waivers (Markdown)")
    report.add_argument("case_id", help="the case id (check_env and triage print it)")
    report.add_argument("--html", metavar="PATH", help="write a self-contained HTML report to PATH ('-': stdout)")
    _server_options(report)

    cases = sub.add_parser("cases", help="list the cases in a store with their next step")
    _server_options(cases)

    skill = sub.add_parser("install-skill", help="copy the skill into Claude Code's skills directory")
    skill.add_argument("--dest", help=f"destination directory (default: {DEFAULT_SKILL_DEST})")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in (None, "serve"):
        if args.command is None:
            args = parser.parse_args(["serve", *(argv or [])])
        return _serve(args)
    if args.command == "check-env":
        return _check_env(args)
    if args.command == "triage":
        return _triage(args)
    if args.command == "call":
        from pt2_bug_basher.cli.call import run

        return run(_config(args), args.tool, args.arguments)
    if args.command == "tools":
        from pt2_bug_basher.cli.call import run_tools

        return run_tools(_config(args), args.json)
    if args.command == "read":
        from pt2_bug_basher.cli.call import run_read

        return run_read(_config(args), args.uri)
    if args.command in ("localize", "minify", "artifacts", "classify"):
        from pt2_bug_basher.cli.commands import run as run_step

        return run_step(args, _config(args))
    if args.command == "report":
        return _report(args)
    if args.command == "cases":
        return _cases(args)
    if args.command == "install-skill":
        return _install_skill(args)
    parser.error(f"unknown command {args.command}")
    return 2


def _config(args: argparse.Namespace):
    from pt2_bug_basher.case.config import ServerConfig

    return ServerConfig.from_options(state_dir=args.state_dir, repo=args.repo, roots=args.root)


def _serve(args: argparse.Namespace) -> int:
    from pt2_bug_basher.mcp_server.server import create_server

    server = create_server(_config(args))
    if args.transport == "stdio":
        server.run("stdio")
        return 0
    import os

    from pt2_bug_basher.domain.errors import BugBasherError
    from pt2_bug_basher.mcp_server.http import TOKEN_ENV, serve_http

    try:
        serve_http(server, args.host, args.port, args.auth_token or os.environ.get(TOKEN_ENV))
    except BugBasherError as exc:
        print(f"pt2-bug-basher: {exc}", file=sys.stderr)
        return 2
    return 0


def _check_env(args: argparse.Namespace) -> int:
    import anyio

    from pt2_bug_basher.case.store import Store
    from pt2_bug_basher.cli.render import format_env_report
    from pt2_bug_basher.domain.errors import BugBasherError
    from pt2_bug_basher.steps.environment import start_case

    config = _config(args)
    try:
        result = anyio.run(
            lambda: start_case(Store(config.state_dir), config.default_repo, args.conda_env, args.python)
        )
    except BugBasherError as exc:
        print(f"pt2-bug-basher: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        print(format_env_report(result))
    return 0 if result.ok else 1


def _triage(args: argparse.Namespace) -> int:
    import anyio

    from pt2_bug_basher.case.store import Store
    from pt2_bug_basher.cli.render import ProgressLine, format_triage
    from pt2_bug_basher.cli.triage import triage
    from pt2_bug_basher.domain.errors import BugBasherError

    config = _config(args)
    script = Path(args.script).resolve()
    line = ProgressLine(sys.stderr) if sys.stderr.isatty() and not args.json else None

    def say(message: str) -> None:
        if line is not None:
            line.say(message)

    try:
        report = anyio.run(lambda: triage(
            Store(config.state_dir), config.default_repo, script, args.conda_env, args.python, args.timeout, say,
        ))
    except BugBasherError as exc:
        if line is not None:
            line.close(ok=False)
        print(f"pt2-bug-basher: {exc}", file=sys.stderr)
        return 2
    finally:
        if line is not None:
            line.close()
    print(report.model_dump_json(indent=2) if args.json else format_triage(report))
    if not report.env.ok:
        return 1
    return 0


def _report(args: argparse.Namespace) -> int:
    from pt2_bug_basher.case.store import Store
    from pt2_bug_basher.domain.errors import BugBasherError
    from pt2_bug_basher.report.build import build_report
    from pt2_bug_basher.report.html import render_html
    from pt2_bug_basher.report.markdown import render_markdown

    config = _config(args)
    if not (config.state_dir / "cases.sqlite3").is_file():
        print(f"pt2-bug-basher: no case store in {config.state_dir}; pass --state-dir (or --repo) of the case.",
              file=sys.stderr)
        return 2
    try:
        case_report = build_report(Store(config.state_dir), args.case_id)
    except BugBasherError as exc:
        print(f"pt2-bug-basher: {exc}", file=sys.stderr)
        return 2
    if args.html is None:
        print(render_markdown(case_report))
    elif args.html == "-":
        print(render_html(case_report))
    else:
        target = Path(args.html).expanduser()
        target.write_text(render_html(case_report), encoding="utf-8")
        print(f"wrote the report of {args.case_id} to {target}")
    return 0


def _cases(args: argparse.Namespace) -> int:
    import time

    from pt2_bug_basher.case.store import Store
    from pt2_bug_basher.execution.state import AppState

    config = _config(args)
    if not (config.state_dir / "cases.sqlite3").is_file():
        print(f"no case store in {config.state_dir}; pass --state-dir (or --repo).", file=sys.stderr)
        return 2
    state = AppState(config=config, store=Store(config.state_dir))
    for case in state.store.list_cases():
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(case.created_at))
        try:
            status = state.workflow(case.case_id).status()
            done = sum(s.status in CLOSED for s in status.steps)
            line = f"{done}/13 steps; next: {status.next_step}"
        except Exception as exc:  # a case whose repository is gone still gets listed
            line = f"status unavailable: {exc}"
        print(f"{case.case_id}  {created}  {case.repo}\n    {line[:300]}")
    return 0


def _install_skill(args: argparse.Namespace) -> int:
    from pt2_bug_basher.content import skill_dir

    dest = Path(args.dest).expanduser() if args.dest else DEFAULT_SKILL_DEST
    dest.mkdir(parents=True, exist_ok=True)
    for item in skill_dir().iterdir():
        target = dest / item.name
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True)
        else:
            shutil.copy2(item, target)
    print(f"installed the pt2-bug-basher skill into {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
