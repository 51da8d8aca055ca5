"""What a compiler bisection found: the trials it ran and the application it isolated."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SourceSite(BaseModel):
    file: str = Field(description="relative to the torch checkout (or the installed torch's parent)")
    abs: str = Field(description="absolute path in the case's interpreter")
    line: int
    function: str


class Application(BaseModel):
    """One application of a subsystem, as a trial saw it."""

    counter: int
    debug: str | None = Field(None, description="the bisector's own debug info (an FX node name, an op, a pass)")
    subject: str | None = Field(None, description="the op or pass it concerns")
    sites: list[SourceSite] = Field(default_factory=list, description="its implementation, most specific first")
    helpers_called: dict[str, int] | None = Field(
        None, description="module-level helpers of the implementing function and how often a failing run called "
                          "them (None: not measured)")


class CodegenCall(SourceSite):
    """A function of Inductor's code generation that a trial ran while generating its kernels."""

    calls: int
    emits: bool = Field(description="it returned code text")


class BisectTrial(BaseModel):
    subsystem: str
    max_enabled: int | None = Field(None, description="TORCH_BISECT_MAX: applications 0..N stay on (-1: all off)")
    outcome: str = Field(description="fixed (passes), same failure, different failure, timeout or skipped")
    run_id: str | None = None
    seconds: float = 0.0


class BisectReport(BaseModel):
    backend: str
    subsystem: str | None = Field(None, description="the first subsystem (bisector's order) whose switch fixes it")
    kind: str | None = Field(None, description="'bisect' (counted applications) or 'config' (one switch)")
    bisect_number: int | None = Field(None, description="the application of the subsystem that brings the failure")
    applications: int | None = Field(None, description="how many applications the subsystem had")
    culprit: Application | None = None
    config: SourceSite | None = Field(None, description="for a config switch: the knob's definition")
    result: str = Field(description="the finding in the bisector's own terms")
    meaning: str
    trials: list[BisectTrial] = Field(default_factory=list)
    candidates: list[Application] = Field(default_factory=list, description="budget ran out: what is left")
    codegen: list[CodegenCall] = Field(
        default_factory=list, description="for a lowering: code-generation functions that ran only with it lowered "
        "(the failing trial), never with it falling back to ATen (the passing one); those returning code text "
        "first, then in first-call order")
    codegen_total: int = Field(0, description="how many such functions there were before the list was cut")
    budget_exhausted: bool = False
    notes: list[str] = Field(default_factory=list)
    seconds: float = 0.0
