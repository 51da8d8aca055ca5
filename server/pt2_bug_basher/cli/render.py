"""What the command line prints for a person: the environment report, the triage report, a live progress line."""

from __future__ import annotations

import re
import shutil
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from pt2_bug_basher.cli.triage import TriageReport


class ProgressLine:
    """A live status line on a terminal: a spinner, the current phase, each run's elapsed time.

    A phase message replaces the line (the finished phase stays above it, ticked); a run's
    "LABEL: running for Ns" updates that run's part of the line. Only used on a TTY.
    """

    FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    _RUN_TICK = re.compile(r"^(?P<label>.+): running for (?P<secs>\d+)s$")

    def __init__(self, stream: TextIO, interval_s: float = 0.1) -> None:
        self._time = time.monotonic
        self.stream = stream
        self.phase = ""
        self.phase_started = self._time()
        self.runs: dict[str, int] = {}
        self.frame = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, args=(interval_s,), daemon=True)
        self._thread.start()

    def say(self, message: str) -> None:
        with self._lock:
            tick = self._RUN_TICK.match(message)
            if tick is not None:
                self.runs[tick["label"]] = int(tick["secs"])
            else:
                self._finish_phase("✓")
                self.phase, self.phase_started, self.runs = message, self._time(), {}
            self._draw()

    def close(self, ok: bool = True) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=1)
        with self._lock:
            self._finish_phase("✓" if ok else "✗")
            self.stream.flush()

    def _finish_phase(self, mark: str) -> None:
        if self.phase:
            elapsed = self._time() - self.phase_started
            self.stream.write(f"\r\x1b[2K{mark} {self.phase} ({elapsed:.1f}s)\n")
            self.phase = ""

    def _draw(self) -> None:
        if not self.phase:
            return
        width = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        runs = "".join(f" · {label} {secs}s" for label, secs in self.runs.items())
        spinner = self.FRAMES[self.frame % len(self.FRAMES)]
        text = f"{spinner} {self.phase}{runs} [{self._time() - self.phase_started:.0f}s]"
        self.stream.write("\r\x1b[2K" + text[:width])
        self.stream.flush()

    def _spin(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            with self._lock:
                self.frame += 1
                self._draw()


def format_env_report(result: Any) -> str:
    lines = [f"Interpreter : {result.python} (Python {result.python_version or '?'})", f"Chosen by   : {result.rule}"]
    if result.active_env:
        lines.append(f"Active env  : {result.active_env}")
    lines.append(f"Repository  : {result.repo}")
    if result.torch is not None:
        t = result.torch
        lines += [
            f"torch       : {t.version} (built from git {t.git_version or '?'})",
            f"torch from  : {t.file}" + ("  [develop build of the repository]" if t.imported_from_repo else ""),
            f"CUDA        : {'available, ' + (t.cuda_version or '?') if t.cuda_available else 'not available'}",
        ]
        for gpu in t.gpus:
            lines.append(f"GPU {gpu.index}       : {gpu.name}, compute capability {gpu.capability}, "
                         f"{gpu.memory_gib} GiB")
        lines.append(f"Triton      : {t.triton_version or 'not installed'}")
        lines.append(f"TORCH_LOGS  : {t.torch_logs.components} components, {t.torch_logs.artifacts} artifacts")
    else:
        lines.append(f"torch       : cannot be imported: {result.import_error}")
    for warning in result.warnings:
        lines.append(f"Warning     : {warning}")
    if result.ask_user:
        lines.append(f"Question    : {result.ask_user}")
    if result.case_id:
        lines.append(f"Case        : {result.case_id}")
    lines.append(f"Next        : {result.next_step}")
    return "\n".join(lines)


def format_triage(report: TriageReport) -> str:
    out = ["== Environment", format_env_report(report.env)]
    repro = report.reproduction
    if repro is None:
        return "\n".join(out)
    out.append("\n== Reproduction")
    for run in repro.runs:
        out.append(f"  {run.run_id}: {run.exit} in {run.duration_s:.1f}s" + ("  (failed)" if run.failed else ""))
    if repro.compile_off is not None:
        off = repro.compile_off
        out.append(f"  {off.run_id}: {off.exit} in {off.duration_s:.1f}s with compilation off (TORCHDYNAMO_DISABLE=1)")
    for run in repro.logged_runs:
        out.append(f"  {run.run_id}: {run.exit} in {run.duration_s:.1f}s with graph-break and recompile logs"
                   + ("  (failed)" if run.failed else ""))
    if repro.failure is None:
        out.append("  The script did not fail.")
        out.append(f"\nNext: {repro.next_step or 'make the script fail the way the bug does'}")
        return "\n".join(out)
    out.append("  Same failure every time: " + ("yes" if repro.reproduced else "NO (flaky or varying)"))
    f = repro.failure
    if f is not None:
        out.append("\n== Failure")
        out.append(f"  Category   : {f.category}" + (f" (also {', '.join(f.secondary)})" if f.secondary else "")
                   + f", confidence {f.confidence:.2f}")
        if f.exception_type:
            first = (f.message or "").splitlines()[0] if f.message else ""
            out.append(f"  Exception  : {f.exception_type}: {first}"[:300])
        if f.user_frame:
            out.append(f"  User code  : {f.user_frame}")
        if f.torch_frame:
            out.append(f"  In torch   : {f.torch_frame}")
        out.append(f"  Signature  : {f.signature}")
        if f.evidence:
            out.append("  Evidence   :")
            out += [f"    {line}" for line in f.evidence]
    if report.evidence:
        fault = {True: "yes", False: "no", None: "not decided"}[report.compiler_at_fault]
        out.append(f"\n== Verdict: {report.category}, compiler at fault: {fault}")
        out += [f"  {line}"[:300] for line in report.evidence]
        if report.advice:
            out.append(f"  Stop: {report.advice}")
    logs = report.with_logs or repro
    if logs.graph_breaks:
        out.append(f"\n== Graph breaks ({logs.graph_break_total} in all)")
        out += [f"  {b.count}x {b.location or '?'}: {b.reason.splitlines()[0][:200]}" for b in logs.graph_breaks]
    if logs.recompiles:
        out.append("\n== Recompiles")
        out += [f"  {r.count}x {r.function or '?'}: {r.reason.splitlines()[0][:200]}" for r in logs.recompiles]
    if report.with_logs is not None:
        out.append(f"\n== Logs: TORCH_LOGS={report.with_logs.env_added.get('TORCH_LOGS')}")
        out.append(f"  full stderr: {report.with_logs.runs[0].stderr}")
    if report.next_steps:
        out.append("\n== Next steps")
        for n, step in enumerate(report.next_steps, 1):
            if step.startswith("register_test(") and report.test_files:
                step = f"write a failing test in one of {', '.join(report.test_files)}, then {step}"
            elif step.startswith("register_test(") and report.test_file_upstream:
                step = (f"write a failing test in an existing test file of the area (upstream PyTorch keeps them in "
                        f"{report.test_file_upstream}, not present in this repository), then {step}")
            out.append(f"  {n}. {step}")
        out.append(f"  Case {repro.case_id} is open: an agent can continue it with the MCP tools "
                   "(pt2-bug-basher serve), or: pt2-bug-basher call TOOL '<json arguments>'.")
    return "\n".join(out)
