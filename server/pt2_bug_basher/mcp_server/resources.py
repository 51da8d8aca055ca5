"""The server's resources: the skill, and each case's status, reports, TORCH_LOGS names, runs, artifacts and
reduced repros."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

from pt2_bug_basher.analysis.torch_logs import NAMES_URI, log_names
from pt2_bug_basher.artifacts.index import resolve_artifact
from pt2_bug_basher.case.pages import read_page
from pt2_bug_basher.content import skill_text
from pt2_bug_basher.domain.errors import BugBasherError, NotFound
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.reduce.minify import minified_file


def register_resources(mcp: MCPServer, state: AppState) -> None:
    """The skill, and every case:// resource: status, reports, runs and their logs, artifacts, reduced repros."""
    for register in (_skill_and_case, _runs_and_files):
        register(mcp, state)


@contextlib.contextmanager
def _resource_errors() -> Iterator[None]:
    """The server's errors as the resource errors a client reads: not found, or another failure."""
    try:
        yield
    except NotFound as exc:
        raise ResourceNotFoundError(str(exc)) from exc
    except BugBasherError as exc:
        raise ResourceError(str(exc)) from exc


def _skill_and_case(mcp: MCPServer, state: AppState) -> None:
    @mcp.resource("skill://pt2-bug-basher/SKILL.md", name="skill", title="The pt2-bug-basher method",
                  mime_type="text/markdown")
    def skill_resource() -> str:
        return skill_text()

    @mcp.resource("case://{case_id}/status", name="case-status", mime_type="application/json",
                  description="A case's steps, evidence, waivers and next step")
    async def case_status(case_id: str) -> str:
        with _resource_errors():
            return (await state.status(case_id)).model_dump_json(indent=2)

    @mcp.resource("case://{case_id}/report", name="case-report", mime_type="text/markdown",
                  description="A case for a person: steps as a timeline, runs, classification, tests, waivers, summary")
    async def case_report(case_id: str) -> str:
        return await _report(state, case_id, "markdown")

    @mcp.resource("case://{case_id}/report.html", name="case-report-html", mime_type="text/html",
                  description="The case report as a self-contained HTML page (inline CSS and SVG, no scripts)")
    async def case_report_html(case_id: str) -> str:
        return await _report(state, case_id, "html")

    @mcp.resource(NAMES_URI, name="torch-logs", mime_type="application/json",
                  description="The TORCH_LOGS names the case's torch registers (components and artifacts), and "
                              "the presets run_with_logs takes")
    def torch_log_names(case_id: str) -> str:
        with _resource_errors():
            case = state.store.get_case(case_id)
        torch = case.env.get("torch") if isinstance(case.env, dict) else None
        torch = torch if isinstance(torch, dict) else {}
        names = log_names(_names(torch.get("log_components")), _names(torch.get("log_artifacts")))
        return json.dumps({"case_id": case_id, "torch": torch.get("version"), **names}, indent=2)

    @mcp.resource("case://{case_id}/sweeps/{sweep_id}", name="case-sweep", mime_type="application/json",
                  description="A regression sweep's full table: every sample, its outcome on the fix and on main, "
                              "and the command that reruns it")
    def case_sweep(case_id: str, sweep_id: str) -> str:
        from pt2_bug_basher.execution.sweep import TABLE_FILE

        with _resource_errors():
            state.store.get_case(case_id)
        path = state.store.case_dir(case_id) / "sweeps" / sweep_id / TABLE_FILE
        if not sweep_id.replace("-", "").isalnum() or not path.is_file():
            raise ResourceNotFoundError(f"case {case_id} has no sweep {sweep_id!r}")
        return path.read_text()


def _runs_and_files(mcp: MCPServer, state: AppState) -> None:
    @mcp.resource("case://{case_id}/runs/{run_id}/{stream}{?page}", name="run-log", mime_type="text/plain",
                  description="A run's full stdout or stderr, in pages of 64 KiB (?page=N, from 1)")
    def run_log(case_id: str, run_id: str, stream: str, page: int = 1) -> str:
        with _resource_errors():
            run = state.store.get_run(run_id, case_id)
        paths = {"stdout": run.stdout_path, "stderr": run.stderr_path}
        if stream not in paths:
            raise ResourceNotFoundError(f"stream must be stdout or stderr, not {stream!r}")
        if not paths[stream]:
            raise ResourceNotFoundError(f"run {run_id} kept no {stream}")
        uri = f"case://{case_id}/runs/{run_id}/{stream}"
        with _resource_errors():
            return read_page(Path(paths[stream]), page, uri)  # type: ignore[arg-type]

    @mcp.resource("case://{case_id}/runs/{run_id}", name="run", mime_type="application/json",
                  description="A run's command, environment additions, exit status, timings and parsed result")
    def run_record(case_id: str, run_id: str) -> str:
        with _resource_errors():
            run = state.store.get_run(run_id, case_id)
        return json.dumps(run.__dict__, indent=2, default=str)

    @mcp.resource("case://{case_id}/artifacts/{+path}{?page}", name="debug-artifact", mime_type="text/plain",
                  description="A file collect_debug_artifacts indexed (graphs, IR, generated code, logs), "
                              "in pages of 64 KiB (?page=N, from 1)")
    def debug_artifact(case_id: str, path: str, page: int = 1) -> str:
        with _resource_errors():
            file = resolve_artifact(state.store, case_id, path)
            return read_page(file, page, f"case://{case_id}/artifacts/{path}")

    @mcp.resource("case://{case_id}/minified/{name}", name="minified-repro", mime_type="text/x-python",
                  description="A reduced repro written by minify")
    def minified(case_id: str, name: str) -> str:
        with _resource_errors():
            return minified_file(state.store, case_id, name).read_text(errors="replace")


def _names(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


async def _report(state: AppState, case_id: str, form: str) -> str:
    from pt2_bug_basher.report.build import build_report
    from pt2_bug_basher.report.html import render_html
    from pt2_bug_basher.report.markdown import render_markdown

    with _resource_errors():
        report = await anyio.to_thread.run_sync(build_report, state.store, case_id)
    return render_html(report) if form == "html" else render_markdown(report)
