"""The MCP server factory: a thin layer over the core modules.

Nothing heavy (torch, GitPython) is imported here or by the tool modules at import time, so the
server answers `tools/list` as fast as a minimal SDK server.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

from pt2_bug_basher import __version__
from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.pages import read_page
from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.case.workflow import STEPS, StepSpec
from pt2_bug_basher.content import category_playbook, prompt_file, skill_body, skill_text
from pt2_bug_basher.domain.errors import BugBasherError, NotFound
from pt2_bug_basher.domain.names import ToolName
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
        await state.recover()
        yield state

    mcp = MCPServer(SERVER_NAME, title="PT2 Bug Basher", version=__version__, instructions=INSTRUCTIONS,
                    lifespan=lifespan)
    mcp.state = state  # type: ignore[attr-defined]  # typed startup state, for tests and tool modules
    for module in registered_modules():
        importlib.import_module(f"pt2_bug_basher.mcp_server.tools.{module}").register(mcp, state)
    _register_resources(mcp, state)
    _register_prompts(mcp)
    return mcp


def _register_resources(mcp: MCPServer, state: AppState) -> None:
    @mcp.resource("skill://pt2-bug-basher/SKILL.md", name="skill", title="The pt2-bug-basher method",
                  mime_type="text/markdown")
    def skill_resource() -> str:
        return skill_text()

    @mcp.resource("case://{case_id}/status", name="case-status", mime_type="application/json",
                  description="A case's steps, evidence, waivers and next step")
    async def case_status(case_id: str) -> str:
        try:
            return (await state.status(case_id)).model_dump_json(indent=2)
        except NotFound as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        except BugBasherError as exc:
            raise ResourceError(str(exc)) from exc

    @mcp.resource("case://{case_id}/report", name="case-report", mime_type="text/markdown",
                  description="A case for a person: steps as a timeline, runs, classification, tests, waivers, summary")
    async def case_report(case_id: str) -> str:
        return await _report(state, case_id, "markdown")

    @mcp.resource("case://{case_id}/report.html", name="case-report-html", mime_type="text/html",
                  description="The case report as a self-contained HTML page (inline CSS and SVG, no scripts)")
    async def case_report_html(case_id: str) -> str:
        return await _report(state, case_id, "html")

    @mcp.resource("case://{case_id}/runs/{run_id}/{stream}{?page}", name="run-log", mime_type="text/plain",
                  description="A run's full stdout or stderr, in pages of 64 KiB (?page=N, from 1)")
    def run_log(case_id: str, run_id: str, stream: str, page: int = 1) -> str:
        try:
            run = state.store.get_run(run_id, case_id)
        except NotFound as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        paths = {"stdout": run.stdout_path, "stderr": run.stderr_path}
        if stream not in paths:
            raise ResourceNotFoundError(f"stream must be stdout or stderr, not {stream!r}")
        if not paths[stream]:
            raise ResourceNotFoundError(f"run {run_id} kept no {stream}")
        uri = f"case://{case_id}/runs/{run_id}/{stream}"
        try:
            return read_page(Path(paths[stream]), page, uri)  # type: ignore[arg-type]
        except BugBasherError as exc:
            raise ResourceError(str(exc)) from exc

    @mcp.resource("case://{case_id}/runs/{run_id}", name="run", mime_type="application/json",
                  description="A run's command, environment additions, exit status, timings and parsed result")
    def run_record(case_id: str, run_id: str) -> str:
        try:
            run = state.store.get_run(run_id, case_id)
        except NotFound as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        return json.dumps(run.__dict__, indent=2, default=str)


async def _report(state: AppState, case_id: str, form: str) -> str:
    from pt2_bug_basher.report.build import build_report, render_html, render_markdown

    try:
        report = await anyio.to_thread.run_sync(build_report, state.store, case_id)
    except NotFound as exc:
        raise ResourceNotFoundError(str(exc)) from exc
    except BugBasherError as exc:
        raise ResourceError(str(exc)) from exc
    return render_html(report) if form == "html" else render_markdown(report)


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
