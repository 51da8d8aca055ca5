"""The MCP server factory: a thin layer over the core modules.

Nothing heavy (torch, GitPython) is imported here or by the tool modules at import time, so the
server answers `tools/list` as fast as a minimal SDK server.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mcp.server import MCPServer

from pt2_bug_basher import __version__
from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.workflow import STEPS, StepSpec
from pt2_bug_basher.content import category_playbook, prompt_file, skill_body
from pt2_bug_basher.domain.errors import NotFound
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.resources import register_resources
from pt2_bug_basher.mcp_server.tools import registered_modules

SERVER_NAME = "pt2-bug-basher"

_INSTRUCTIONS = """\
pt2-bug-basher debugs PyTorch 2 compiler failures (torch.compile, torch.export, Dynamo, AOTAutograd,
Inductor) with a fixed method. The server runs, parses and remembers; you think. Steps, in order:
{steps}
A tool whose step's prerequisites are missing refuses and names the exact call that unblocks it.
Evidence counts only if the server observed it, and verification/review only for the current code.
waive_step(case_id, step, reason) skips a gate on the record. get_workflow(case_id) shows where a
case stands and the single next step; every result ends with next_step. Full logs and artifacts
are resources (case://{{case_id}}/runs/{{run_id}}/stdout|stderr, case://{{case_id}}/artifacts/<path>);
the method is skill://pt2-bug-basher/SKILL.md.
"""


def _step_line(spec: StepSpec) -> str:
    tools = ", ".join(tool.value for tool in spec.tools) or "your work"
    return f"{spec.number:>2} {tools} -> {spec.title}" + (f"; {spec.note}" if spec.note else "")


INSTRUCTIONS = _INSTRUCTIONS.format(steps="\n".join(_step_line(spec) for spec in STEPS))


def create_server(config: ServerConfig) -> MCPServer:
    state = AppState.open(config)

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[AppState]:
        # Per connection for an in-process client: the warm interpreters outlive it (they stop when idle,
        # when the least recently used gives way, or when this process exits).
        await state.recover()
        yield state

    mcp = MCPServer(SERVER_NAME, title="PT2 Bug Basher", version=__version__, instructions=INSTRUCTIONS,
                    lifespan=lifespan)
    mcp.state = state  # type: ignore[attr-defined]  # typed startup state, for tests and tool modules
    for module in registered_modules():
        importlib.import_module(f"pt2_bug_basher.mcp_server.tools.{module}").register(mcp, state)
    register_resources(mcp, state)
    _register_prompts(mcp)
    return mcp


def _register_prompts(mcp: MCPServer) -> None:
    @mcp.prompt(name="pt2-bug-basher", title="Debug a PyTorch 2 compiler failure",
                description="The whole pt2-bug-basher method, applied to an error text or repro script")
    def method_prompt(error_text: str | None = None, repro_path: str | None = None) -> str:
        parts = [skill_body()]
        if error_text:
            parts.append("## The failure to debug\n\n```\n" + error_text[-20000:] + "\n```")
        if repro_path:
            parts.append(f"## The repro\n\nThe reproduction script is `{repro_path}`.")
        parts.append("Start with check_env, then follow each tool result's next_step.")
        return "\n\n".join(parts)

    @mcp.prompt(name="playbook", title="Playbook for one failure category",
                description="How to diagnose, reduce and fix one category of failure")
    def playbook(category: str) -> str:
        try:
            _, body = category_playbook(category)
        except NotFound as exc:
            raise ValueError(f"no playbook for {category!r}") from exc
        return body

    @mcp.prompt(name="self-review", title="Self-review checklist",
                description="The checklist to apply to a fix before celebrating")
    def self_review() -> str:
        return prompt_file("review_checklist.md")


def tool_names() -> list[str]:
    return [t.value for t in ToolName]
