"""run_with_logs — steps 2 and 6: reproduce (repeat ≥ 2) and collect TORCH_LOGS, parsed into structure."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.repro import MAX_REPEAT, RunWithLogsResult, check_args, check_repeat, run_repro
from pt2_bug_basher.execution.runs import MAX_TIMEOUT_S, check_env_additions, check_timeout
from pt2_bug_basher.mcp_server.tools._base import RUNS_CODE, progress_reporter, tool_errors


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.run_with_logs.value, title="Steps 2 and 6: reproduce and collect logs",
              annotations=RUNS_CODE)
    @tool_errors
    async def run_with_logs(
        ctx: Context,
        case_id: Annotated[str, Field(max_length=200)],
        script: Annotated[str, Field(description="the repro script (under the case's repository)", max_length=4096)],
        args: Annotated[list[str] | None, Field(description="arguments for the script")] = None,
        logs: Annotated[str | None, Field(
            description="a TORCH_LOGS spec (e.g. '+dynamo,graph_breaks') or a preset named after a category: "
                        "graph_break, recompile, dynamo_internal, backend_compiler_failed, triton, accuracy, "
                        "runtime_crash, export. runtime_crash also sets CUDA_LAUNCH_BLOCKING=1, "
                        "PYTORCH_NO_CUDA_MEMORY_CACHING=1, TORCHINDUCTOR_NAN_ASSERTS=1 and Inductor's "
                        "triton.debug_sync_kernel", max_length=2000)] = None,
        repeat: Annotated[int, Field(description=f"runs of the same command (1-{MAX_REPEAT}), in parallel where "
                                                 "cores allow; 2 or more completes the reproduction step")] = 2,
        trace: Annotated[bool, Field(description="also set TORCH_TRACE and run tlparse on the first run")] = False,
        env: Annotated[dict[str, str] | None, Field(description="extra environment variables")] = None,
        cwd: Annotated[str | None, Field(description="working directory (default: the script's)", max_length=4096)] = None,
        timeout_s: Annotated[float | None, Field(description=f"per run, seconds (default 600, max {MAX_TIMEOUT_S:.0f})")] = None,
    ) -> RunWithLogsResult:
        """Steps 2 and 6. Run the repro with the case's interpreter (repeat times, in parallel within
        the cores) and return a compact failure record: exception, innermost user and torch frames,
        a signature stable across runs, the category, graph breaks and recompiles parsed from the
        logs, and the stderr lines that matter. Full logs are resources. With repeat ≥ 2 and the
        same signature every time, the reproduction step completes; with `logs` after the main
        check, the logs step completes."""
        flow = await state.gate(ToolName.run_with_logs, case_id)
        case = flow.case
        script_path = state.confine(case, script, "script")
        if not script_path.is_file():
            raise InvalidInput(f"script {script_path} does not exist or is not a file.")
        work_dir = state.confine(case, cwd, "cwd") if cwd else None
        if work_dir is not None and not work_dir.is_dir():
            raise InvalidInput(f"cwd {work_dir} is not a directory.")
        spec = None
        env_add = check_env_additions(env)
        inductor_config: dict[str, object] = {}
        if logs:
            from pt2_bug_basher.analysis.torch_logs import PRESET_ENV, PRESET_INDUCTOR_CONFIG, resolve_logs

            torch_info = case.env.get("torch") or {}
            spec = resolve_logs(logs, torch_info.get("log_components", []), torch_info.get("log_artifacts", []))
            # A category preset also sets what that category's diagnosis needs; the caller's env wins.
            env_add = {**PRESET_ENV.get(logs, {}), **env_add}
            inductor_config = dict(PRESET_INDUCTOR_CONFIG.get(logs, {}))
        result = await run_repro(
            state.store, case, script_path, args=check_args(args), logs_spec=spec, repeat=check_repeat(repeat),
            trace=trace, env_add=env_add, timeout_s=check_timeout(timeout_s), cwd=work_dir,
            progress=progress_reporter(ctx), main_check_done=flow.is_complete(Step.main_check),
            inductor_config=inductor_config,
        )
        result.next_step = await next_step(state, result, repeat, spec)
        return result


async def next_step(state: AppState, result: RunWithLogsResult, repeat: int, spec: str | None) -> str:
    case_id = result.case_id
    failed = sum(r.failed for r in result.runs)
    call = f'run_with_logs(case_id="{case_id}", script="{result.script}"'
    if failed == 0:
        advice = ("The script did not fail: exit 0, no graph break and no mismatch reported. "
                  "Check that it runs the failing configuration (backend, mode, dynamic, device, dtype) and that "
                  "it raises or asserts on a wrong result.")
        if not spec:
            advice += f" If the problem is graph breaks or recompiles, they only show in logs: {call}, logs=\"graph_break\")."
        return advice
    if any(r.timed_out for r in result.runs):
        return ("A run hit the timeout and was killed. If the script hangs for real, classify that; otherwise "
                f"raise timeout_s: {call}, timeout_s=1800).")
    if repeat < 2:
        return f"It failed once. Confirm it fails the same way every time: {call}, repeat=2)."
    if not result.reproduced:
        return ("The failure is not stable: it failed {}/{} times{}. Look for nondeterminism (random inputs without "
                "a seed, threads, TORCHINDUCTOR_COMPILE_THREADS=1 to serialise compilation), then {}, repeat=3)."
                ).format(failed, len(result.runs), "" if result.same_signature else " with different signatures", call)
    status = (await state.status(case_id))
    category = result.failure.category if result.failure else "unknown"
    if "logs" in result.recorded or not status.next_step.startswith("Step 6"):
        return status.next_step
    from pt2_bug_basher.analysis.torch_logs import PRESETS

    preset = category if category in PRESETS else "dynamo_internal"
    return f'Step 6 (collect logs): {call}, logs="{preset}")'
