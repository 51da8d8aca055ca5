"""Hostile input for every tool: generated arguments are answered with a tool error or a valid result,
and the server stays up. Arguments are generated from each tool's own input schema, with hostile
values mixed in: huge and empty strings, unicode, NUL bytes, `..` and symlinks escaping the allowed
roots, refs beginning with `-`, absurd numbers, unknown and real case ids."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.mcp_server.server import create_server
from pt2_bug_basher.steps.environment import start_case

EXAMPLES_PER_TOOL = int(os.environ.get("PT2BB_FUZZ_EXAMPLES", "40"))
TRIED: dict[str, int] = {}


@pytest.fixture(scope="module")
def fuzz_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    repo = root / "repo"
    repo.mkdir()
    (repo / "ok.py").write_text("print('fine')\n")
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.py").write_text("raise SystemExit('must never run')\n")
    (repo / "escape.py").symlink_to(outside / "secret.py")
    (repo / "escape_dir").symlink_to(outside)
    config = ServerConfig(state_dir=root / "state", default_repo=repo, allowed_roots=(root / "repo",))
    case = anyio.run(lambda: start_case(Store(config.state_dir), repo, python=sys.executable))
    server = create_server(config)
    tools = anyio.run(_list, server)
    return server, tools, case.case_id, repo, outside


async def _list(server):
    async with Client(server) as client:
        return {t.name: t for t in (await client.list_tools()).tools}


def hostile_strings(repo: Path, case_id: str) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from([
            "", " ", "\x00", "a\x00b", "x" * 100_000, "../" * 40 + "etc/passwd", "/etc/passwd", "~/.ssh/id_rsa",
            str(repo / ".." / ".." / "etc"), str(repo / "escape.py"), str(repo / "escape_dir" / "secret.py"),
            "escape.py", "-rf", "--output=/tmp/x", "--upload-pack=touch /tmp/pwned", "-", "main", "HEAD~999",
            "refs/heads/../../x", "$(touch /tmp/pwned)", "`id`", "; rm -rf /", "💥🔥", "\u202e\u0000\uffff",
            "case-00000000-deadbeef", case_id, str(repo / "ok.py"), "ok.py", "graph_break", "+dynamo,nope",
            "all", "test/dynamo/test_misc.py", "reduce", "environment",
        ]),
        st.text(max_size=300),
    )


def value_for(schema: dict, strings, depth: int = 0) -> st.SearchStrategy:
    if "anyOf" in schema:
        return st.one_of([value_for(s, strings, depth) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.one_of(st.sampled_from(schema["enum"]), strings)
    kind = schema.get("type")
    if kind == "string":
        return strings
    if kind == "integer":
        return st.one_of(st.sampled_from([0, -1, 1, 2, 10**12, -(10**12), 2**63]), st.integers())
    if kind == "number":
        return st.one_of(st.sampled_from([0.0, -1.0, 1e-9, 1e12, float("inf")]), st.floats(allow_nan=False))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array" and depth < 2:
        return st.lists(value_for(schema.get("items", {}), strings, depth + 1), max_size=5)
    if kind == "object" and depth < 2:
        return st.dictionaries(strings, strings, max_size=4)
    return st.one_of(strings, st.integers(), st.none())


def arguments_for(tool, strings) -> st.SearchStrategy[dict]:
    props = tool.input_schema.get("properties", {})
    return st.fixed_dictionaries(
        {}, optional={name: value_for(spec, strings) for name, spec in props.items()}
    )


def _tool_names() -> list[str]:
    from pt2_bug_basher.mcp_server.tools import registered_modules

    return registered_modules()


@pytest.mark.parametrize("tool_name", _tool_names())
def test_every_tool_survives_hostile_arguments(fuzz_env, tool_name):
    server, tools, case_id, repo, outside = fuzz_env
    tool = tools[tool_name]
    strings = hostile_strings(repo, case_id)

    @settings(max_examples=EXAMPLES_PER_TOOL, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(arguments_for(tool, strings))
    def check(arguments):
        async def call():
            async with Client(server) as client:
                with anyio.fail_after(120):
                    result = await client.call_tool(tool_name, arguments)
                if result.is_error:
                    text = result.content[0].text
                    assert text and "Traceback" not in text, text
                    assert text != f"Error executing tool {tool_name}", f"unanticipated crash for {arguments!r}"
                else:
                    assert result.structured_content is not None
                    assert "next_step" in result.structured_content
                # The server is still up and answering.
                assert (await client.list_tools()).tools

        anyio.run(call)
        TRIED[tool_name] = TRIED.get(tool_name, 0) + 1

    check()
    # Nothing outside the allowed roots ran or was written.
    assert sorted(p.name for p in outside.iterdir()) == ["secret.py"]
    assert not Path("/tmp/pwned").exists()
    print(f"{tool_name}: {TRIED.get(tool_name, 0)} generated inputs")
