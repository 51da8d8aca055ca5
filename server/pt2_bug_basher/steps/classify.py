"""Step 7 (classify): which failure category, on what evidence, and which diagnostic to run next."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.suspects import exception_suspects
from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import ClassifyEvidence, EvidenceLineRecord, ReproduceEvidence, Suspect
from pt2_bug_basher.domain.names import Step
from pt2_bug_basher.playbooks import CategoryGuide, diagnostic_call, guide

MAX_TEXT = 8 * 1024 * 1024


class EvidenceLineOut(BaseModel):
    line_no: int
    text: str
    rule: str


class ClassifyResult(BaseModel):
    category: str
    secondary: list[str]
    confidence: float
    evidence: list[EvidenceLineOut] = Field(description="verbatim lines that decided it, with 1-based line numbers")
    compile_mode: str | None = Field(None, description="torch.compile, strict_export or non_strict_export, if visible")
    phase: str | None = Field(None, description="trace, backend_compile or runtime, if visible")
    exception_type: str | None = None
    signature: str | None = None
    suspects: list[Suspect] = Field(default_factory=list, description=(
        "an exception raised inside torch: its innermost torch frames that are not compile plumbing, innermost "
        "first (file relative to the torch checkout)"))
    diagnostic: str = Field(description="the diagnostic to run next, as an exact tool call")
    guide: CategoryGuide
    recorded: bool = Field(description="recorded as the case's classification")
    next_step: str


async def classify_error(
    state: AppState, case_id: str | None = None, text: str | None = None, run_id: str | None = None,
) -> ClassifyResult:
    """Classify error text or a run's stderr; with a case, record it as the case's classification."""
    from pt2_bug_basher.analysis.classify import classify

    if (text is None) == (run_id is None):
        raise InvalidInput("pass exactly one of text (the error output) or run_id (a run of the case).")
    exit_code = signal_name = None
    script = None
    if run_id is not None:
        run = state.store.get_run(run_id, case_id)
        case_id = case_id or run.case_id
        text = Path(run.stderr_path).read_text(errors="replace") if run.stderr_path else ""
        exit_code, signal_name = run.exit_code, run.signal
        script = run.argv[1] if len(run.argv) > 1 else None
    if case_id is not None:
        state.store.get_case(case_id)
    result = classify(text or "", exit_code=exit_code, signal_name=signal_name)
    recorded = False
    if case_id is not None:
        if script is None:
            repro = state.store.evidence(case_id, Step.reproduce.value)
            script = next((e.payload(ReproduceEvidence).script for e in reversed(repro) if e.ok), None)
        state.store.add_evidence(
            case_id, Step.classify.value, result.category != "unknown",
            f"{result.category} (confidence {result.confidence:.2f})"
            + (f", also {', '.join(result.secondary)}" if result.secondary else ""),
            data=ClassifyEvidence(
                category=result.category, secondary=list(result.secondary),
                evidence=[EvidenceLineRecord(line_no=e.line_no, text=e.text, rule=e.rule) for e in result.evidence],
                compile_mode=result.compile_mode, phase=result.phase),
            run_id=run_id,
        )
        recorded = True
    failure = result.failure
    diagnostic = diagnostic_call(result.category, case_id, script)
    if case_id is not None:
        nxt = (await state.status(case_id)).next_step
    else:
        nxt = f"Run the diagnostic: {diagnostic}" if result.category != "unknown" else (
            "The text shows no known failure pattern. Pass the full stderr (the last exception and the "
            "lines before it), or reproduce it with run_with_logs and classify the run_id.")
    return ClassifyResult(
        category=result.category, secondary=list(result.secondary), confidence=result.confidence,
        evidence=[EvidenceLineOut(line_no=e.line_no, text=e.text, rule=e.rule) for e in result.evidence],
        compile_mode=result.compile_mode, phase=result.phase,
        exception_type=failure.exception_type if failure else None,
        signature=failure.signature if failure else None,
        suspects=exception_suspects(text or "") if result.category != "accuracy" else [],
        diagnostic=diagnostic, guide=guide(result.category), recorded=recorded, next_step=nxt,
    )
