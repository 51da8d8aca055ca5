"""One pydantic model per workflow step's evidence payload.

The store keeps each payload as JSON (as it always has) and reads it back as the step's model.
Rows written by older versions, or damaged ones, still load: a field whose stored value does not
validate falls back to its default, and keys a model does not know are kept as extras.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pt2_bug_basher.domain.names import Step


class EvidencePayload(BaseModel):
    """Base of every step's payload; unknown keys from older rows are kept, not lost."""

    model_config = ConfigDict(extra="allow")


class EnvironmentEvidence(EvidencePayload):
    python: str | None = None


class ReproduceEvidence(EvidencePayload):
    script: str = Field("", description="the script that ran: the case's copy, when the original lay outside the "
                                        "allowed roots")
    script_origin: str | None = Field(None, description="where the case's copy was taken from")
    args: list[str] = Field(default_factory=list)
    signature: str | None = None
    category: str | None = None
    exception_type: str | None = None
    message: str | None = None
    run_ids: list[str] = Field(default_factory=list)
    repeat: int | None = None
    signatures: list[str] = Field(default_factory=list, description="a failed attempt: each run's signature")
    script_sha256: str | None = Field(None, description="the script's content when it ran")
    own_backend: str | None = Field(None, description="a user error raised in the script's own backend: "
                                                      "`function (file:line)`")


class ReduceEvidence(EvidencePayload):
    minimized_path: str | None = None
    before: dict[str, int] = Field(default_factory=dict)
    after: dict[str, int] = Field(default_factory=dict)
    mode: str | None = None
    comparison: str | None = None
    budget_exhausted: bool = False
    already_minimal: bool = Field(False, description="judged minimal from its source: no reduction was attempted")


class TestEvidence(EvidencePayload):
    __test__ = False  # not a pytest test class

    test_file: str = ""
    test_name: str = ""
    class_name: str | None = None
    method: str | None = None
    node_id: str = ""
    keyword: str | None = None
    message: str | None = None
    category: str | None = None
    signature: str | None = None
    exception_type: str | None = None
    frame: str | None = None
    comparison: str | None = None
    outcome: str | None = Field(None, description="a refused attempt: what pytest reported")


class MainCheckEvidence(EvidencePayload):
    ref: str = "main"
    commit: str | None = None
    worktree: str | None = None
    node_id: str | None = None
    outcome: str | None = None
    message: str | None = None
    exception_type: str | None = None
    category: str | None = None
    torch_file: str | None = None
    test_file: str | None = None
    test_sha256: str | None = Field(None, description="digest of the registered test file's meaning (its syntax tree, "
                                                      "imports sorted, its other tests left out) when it ran on "
                                                      "the ref")


class LogsEvidence(EvidencePayload):
    logs: str | None = None
    run_ids: list[str] = Field(default_factory=list)
    script: str | None = Field(None, description="the script the logged run ran: the case's current repro from then")


class EvidenceLineRecord(BaseModel):
    line_no: int | None = None
    text: str = ""
    rule: str = ""


class ClassifyEvidence(EvidencePayload):
    category: str | None = None
    secondary: list[str] = Field(default_factory=list)
    evidence: list[EvidenceLineRecord] = Field(default_factory=list)
    compile_mode: str | None = None
    phase: str | None = None
    text_category: str | None = Field(None, description="what the text alone read, where it differs from the "
                                                        "category the reproduction settled (which stands)")


class ArtifactsEvidence(EvidencePayload):
    debug_dir: str | None = None
    index: str | None = None
    run_id: str | None = None
    script: str | None = None
    graphs: int = 0
    kernels: int = 0
    files: int = 0
    failed: bool | None = None
    failure_graph: str | None = None
    failure_kernel: str | None = None


class TestOutcomeRecord(BaseModel):
    __test__ = False

    node_id: str
    outcome: str


class SweepSampleRecord(BaseModel):
    sample: str = Field("", description="op, sample index, dtype, requires_grad, backend, dynamic; or a program")
    outcome: str = Field("", description="on the fix: pass, fail, error, skip, timeout, not_run")
    main_outcome: str | None = Field(None, description="on main; None when main was not swept")
    message: str = ""
    rerun: str = Field("", description="one shell command that runs this sample alone on the fix")
    main_rerun: str | None = None


class SweepEvidence(EvidencePayload):
    """The regression sweep run_tests ran beside the tests: the case's ops' OpInfo samples and its patterns'
    programs, compiled against eager on the fix and on main."""

    ops: list[str] = Field(default_factory=list)
    backend: str | None = None
    samples: int = Field(0, description="samples that ran on the fix (not skipped, not cut by the budget)")
    counts: dict[str, int] = Field(default_factory=dict, description="outcomes on the fix")
    main_counts: dict[str, int] = Field(default_factory=dict, description="outcomes on main")
    compared_with_main: bool = False
    regressions: list[SweepSampleRecord] = Field(default_factory=list, description="fail on the fix, pass on main")
    also_fixed: list[SweepSampleRecord] = Field(default_factory=list, description="pass on the fix, fail on main")
    pre_existing: list[SweepSampleRecord] = Field(default_factory=list, description="fail on both")
    failing: list[SweepSampleRecord] = Field(default_factory=list, description="fail on the fix, main not swept")
    regression_count: int = 0
    also_fixed_count: int = 0
    pre_existing_count: int = 0
    wall_s: float = 0.0
    table: str | None = Field(None, description="the full table's resource URI")
    notes: list[str] = Field(default_factory=list)

    def line(self) -> str:
        """`N samples of M ops swept, R regressions, K also fixed` (and pre-existing failures)."""
        text = f"{self.samples} samples of {len(self.ops)} ops swept ({self.backend})"
        if not self.compared_with_main:
            return f"{text}, {sum(self.counts.get(o, 0) for o in ('fail', 'error', 'timeout'))} failing; main not swept"
        text = (f"{text}, {self.regression_count} regressions, {self.also_fixed_count} also fixed, "
                f"{self.pre_existing_count} failing before and after")
        if self.samples and not self.tells_apart:
            text += ("; no sample tells main from the fix, so the sweep does not reach the bug: it shows only that "
                     "these samples did not regress, and the fix rests on the registered test")
        return text

    @property
    def tells_apart(self) -> bool:
        """Some sample's outcome differs between the fix and main (newly failing or newly passing)."""
        return self.compared_with_main and bool(self.regression_count or self.also_fixed_count)


class VerifyEvidence(EvidencePayload):
    registered: str | None = None
    registered_outcome: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    tests: list[TestOutcomeRecord] = Field(default_factory=list)
    run_ids: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    sweep: SweepEvidence | None = None


class FileStatRecord(BaseModel):
    path: str = ""
    status: str | None = None
    added: int | None = None
    removed: int | None = None


class FindingRecord(BaseModel):
    severity: str = ""
    kind: str | None = None
    file: str | None = None
    line: int | None = None
    text: str = ""


class ReviewEvidence(EvidencePayload):
    base: str | None = None
    main_ref: str | None = None
    files: list[FileStatRecord] = Field(default_factory=list)
    lines_changed: int = 0
    findings: list[FindingRecord] = Field(default_factory=list)
    tests_added: list[str] = Field(default_factory=list, description="test functions the change adds")
    linter: str | None = None
    lint_status: str | None = None


class CelebrateEvidence(EvidencePayload):
    root_cause: str = ""
    fix_summary: str = ""
    celebration: str = ""


class LadderRowRecord(BaseModel):
    backend: str = "?"
    dynamic: str = "script"
    outcome: str = ""
    match: str | None = None
    failure: str | None = None
    run_id: str = ""
    seconds: float | None = None


SuspectEvidence = Literal["bisection", "config", "exception", "none_origin", "guards", "recent_change", "spectrum",
                          "helper", "codegen", "fx_codegen", "graph_break"]
"""What points at a suspect: the bisection's culprit, a config switch that fixes it, a frame of an exception
raised in torch, a function that returned a None of its own shortly before an exception that used a None,
Dynamo's guards, a recent commit, the execution spectra of failing and passing runs, a helper the culprit calls,
code generation that ran only with the culprit, the FX code generation that wrote the generated line that
raised, the site of the graph break Dynamo reported and what its condition calls."""


class LineRange(BaseModel):
    first: int
    last: int


class Suspect(BaseModel):
    """A place in torch's source that may hold the bug, most likely first in any list of them."""

    file: str = Field(description="relative to the torch checkout (or to the installed torch's parent)")
    line: int | None = None
    function: str = Field(description="qualified name of the function (or config knob)")
    why: str = Field(description="the evidence that points here")
    evidence: list[SuspectEvidence] = Field(default_factory=list, description="each kind of evidence that points here")
    lines: list[LineRange] = Field(default_factory=list, description=(
        "line ranges of the function that ran in failing runs and in no passing run: read these first"))
    score: float | None = Field(None, description="its spectrum score (Ochiai, 0-1), where the spectra rank it")


class LocalizeRecord(EvidencePayload):
    """What localize found; kept beside the step evidence (localize completes no step of its own)."""

    first_failing: str | None = None
    layer: str | None = None
    signature: str | None = None
    table: list[LadderRowRecord] = Field(default_factory=list)
    suspects: list[Suspect] = Field(default_factory=list)
    guard_flags: list[str] = Field(default_factory=list, description=(
        "guard shapes the eager run with the guards log flagged (an entry reusable for inputs it was not traced "
        "for): the failure is in Dynamo's guards"))


EVIDENCE_MODELS: dict[Step, type[EvidencePayload]] = {
    Step.environment: EnvironmentEvidence,
    Step.reproduce: ReproduceEvidence,
    Step.reduce: ReduceEvidence,
    Step.test: TestEvidence,
    Step.main_check: MainCheckEvidence,
    Step.logs: LogsEvidence,
    Step.classify: ClassifyEvidence,
    Step.artifacts: ArtifactsEvidence,
    Step.verify: VerifyEvidence,
    Step.review: ReviewEvidence,
    Step.celebrate: CelebrateEvidence,
}

P = TypeVar("P", bound=EvidencePayload)


def model_for(step: str) -> type[EvidencePayload]:
    try:
        return EVIDENCE_MODELS[Step(step)]
    except (ValueError, KeyError):
        return EvidencePayload


def lenient(model: type[P], raw: Any) -> P:
    """`raw` as `model`; fields whose stored value does not validate fall back to their defaults."""
    data = dict(raw) if isinstance(raw, dict) else {}
    for _ in range(len(data) + 1):
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
            if not bad & data.keys():
                break
            data = {k: v for k, v in data.items() if k not in bad}
    return model()


def load_payload(step: str, raw: Any) -> EvidencePayload:
    return lenient(model_for(step), raw)
