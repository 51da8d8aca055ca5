"""`pt2-bug-basher call TOOL '<json arguments>'`: any tool through the real server, from a shell; and
`pt2-bug-basher tools`: what the server lists (tools/list), one line a tool or the whole listing as JSON;
`pt2-bug-basher read URI`: a resource the tools name (case://..., skill://...), as resources/read gives it.

The server runs in-process (the same factory `serve` uses) behind an in-memory MCP client, so
the call takes the path an agent's does: argument validation, gates, evidence, lifespan.
Exit status: 0 with the structured result as JSON on stdout; 1 when the tool refuses (its
message on stderr); 2 for an unknown tool or arguments that are not a JSON object.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
import sys
from collections.abc import Callable
from typing import Any, TextIO

from pt2_bug_basher.case.config import ServerConfig


def parse_arguments(text: str) -> dict[str, Any]:
    """The arguments as a JSON object; ValueError saying what is wrong otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the arguments are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                         "pass one JSON object, e.g. '{\"case_id\": \"case-...\"}'") from None
    if not isinstance(value, dict):
        raise ValueError(f"the arguments must be a JSON object ({{...}}), not {type(value).__name__}")
    return value


async def call_tool(config: ServerConfig, tool: str, arguments: dict[str, Any],
                    say: Callable[[str], None] | None = None) -> tuple[int, str]:
    """(exit status, text for stdout or stderr) of one tool call through an in-process server."""
    from mcp import Client

    from pt2_bug_basher.mcp_server.server import create_server

    server = create_server(config)
    names = [t.name for t in await server.list_tools()]
    if tool not in names:
        close = difflib.get_close_matches(tool, names, n=2)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        return 2, f"no tool {tool!r}{hint}; the tools are: {', '.join(names)}"

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if say is not None and message:
            say(message)

    async with Client(server) as client:
        result = await client.call_tool(tool, arguments, progress_callback=on_progress)
    text = "\n".join(getattr(block, "text", "") for block in result.content).strip()
    if result.is_error:
        return 1, text or f"{tool} refused the call"
    if result.structured_content is None:
        return 0, text
    return 0, json.dumps(result.structured_content, indent=2, ensure_ascii=False)


def run(config: ServerConfig, tool: str, arguments_text: str, stdout: TextIO | None = None,
        stderr: TextIO | None = None) -> int:
    import anyio

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr  # the streams of the moment, not of the import

    from pt2_bug_basher.cli.render import ProgressLine
    from pt2_bug_basher.domain.errors import BugBasherError

    try:
        arguments = parse_arguments(arguments_text)
    except ValueError as exc:
        print(f"pt2-bug-basher call: {exc}", file=stderr)
        return 2
    logging.getLogger("mcp").setLevel(logging.WARNING)  # the SDK logs each refusal at INFO: printed once below
    line = ProgressLine(stderr) if stderr.isatty() else None
    status, text = 2, ""
    try:
        status, text = anyio.run(lambda: call_tool(config, tool, arguments, line.say if line else None))
    except BugBasherError as exc:
        text = str(exc)
    finally:
        if line is not None:
            line.close(ok=status == 0)
    if status == 0:
        print(text, file=stdout)
    else:
        print(f"pt2-bug-basher call: {text}" if status == 2 else text, file=stderr)
    return status


SUMMARY_CHARS = 160
_STEP_PREFIX = re.compile(r"^(Steps? \d+(?: and \d+)?\. )")


def summary_line(description: str | None) -> str:
    """A tool's description in one line: the first sentence of its first paragraph (after a 'Step N.' label)."""
    paragraph = " ".join((description or "").strip().split("\n\n")[0].split())
    prefix = _STEP_PREFIX.match(paragraph)
    label = prefix.group(1) if prefix else ""
    rest = paragraph[len(label):]
    end = re.search(r"\.(?=\s|$)", rest)
    sentence = label + (rest[:end.start() + 1] if end else rest)
    return sentence if len(sentence) <= SUMMARY_CHARS else sentence[:SUMMARY_CHARS - 1].rstrip() + "\u2026"


async def list_tools(config: ServerConfig) -> list[dict[str, Any]]:
    """tools/list of an in-process server, through a real client: each tool as the protocol sends it."""
    from mcp import Client

    from pt2_bug_basher.mcp_server.server import create_server

    async with Client(create_server(config)) as client:
        listed = await client.list_tools()
    return [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in listed.tools]


def run_tools(config: ServerConfig, as_json: bool, stdout: TextIO | None = None) -> int:
    import anyio

    stdout = stdout or sys.stdout

    logging.getLogger("mcp").setLevel(logging.WARNING)
    tools = anyio.run(lambda: list_tools(config))
    if as_json:
        print(json.dumps({"tools": tools}, indent=2, ensure_ascii=False), file=stdout)
        return 0
    width = max(len(tool["name"]) for tool in tools)
    for tool in tools:
        print(f"{tool['name']:<{width}}  {summary_line(tool.get('description'))}", file=stdout)
    return 0


async def read_resource(config: ServerConfig, uri: str) -> tuple[int, str]:
    """(exit status, text) of resources/read through an in-process server: 0 with the text, 1 with why not."""
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    from pt2_bug_basher.mcp_server.server import create_server

    async with Client(create_server(config)) as client:
        try:
            result = await client.read_resource(uri)
        except MCPError as exc:
            return 1, f"{uri} could not be read: {exc}"
    texts = [getattr(part, "text", None) for part in result.contents]
    if not any(text is not None for text in texts):
        return 1, f"{uri} holds no text (binary content)"
    return 0, "\n".join(text for text in texts if text is not None)


def run_read(config: ServerConfig, uri: str, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    import anyio

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    if "://" not in uri:
        print(f"pt2-bug-basher read: {uri!r} is not a resource URI; tools name them as case://<case_id>/...",
              file=stderr)
        return 2
    logging.getLogger("mcp").setLevel(logging.WARNING)
    status, text = anyio.run(lambda: read_resource(config, uri))
    print(text, file=stdout if status == 0 else stderr)
    return status
