"""Step 7 (classify): which failure category, on what evidence, and which diagnostic to run next."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.failure import Frame, own_backend_frame, parse, triton_outside_torch
from pt2_bug_basher.analysis.learned import TOKEN_PATTERN, SimilarReport, similar_reports
from pt2_bug_basher.analysis.suspects import exception_suspects
from pt2_bug_basher.case.store import CaseRecord
from pt2_bug_basher.case.workflow import CaseStatus, Workflow
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import ClassifyEvidence, EvidenceLineRecord, ReproduceEvidence, Suspect
from pt2_bug_basher.domain.names import CLOSED, Step, ToolName
from pt2_bug_basher.execution.environment import interpreter_of_frames
from pt2_bug_basher.execution.runs import PROBES
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.playbooks import (
    PLAYBOOKS,
    CategoryGuide,
    diagnostic_call,
    focus,
    guide,
    layer_of,
    with_files,
)

if TYPE_CHECKING:
    from pt2_bug_basher.analysis.classify import Classification

MAX_TEXT = 8 * 1024 * 1024


class EvidenceLineOut(BaseModel):
    line_no: int
    text: str
    rule: str


class SimilarReportOut(BaseModel):
    url: str
    label: str = Field(description="that report's category, from its maintainers' diagnosis")
    subcategory: str
    similarity: float = Field(description="cosine similarity of the two texts' TF-IDF vectors, 0 to 1")


class Reading(BaseModel):
    source: Literal["reproduction", "text"] = Field(description="reproduction: settled by running the case (the "
                                                                "compiled runs and the compile-off run); text: "
                                                                "read from the text alone")
    category: str
    confidence: float | None = None


class ClassifyResult(BaseModel):
    category: str = Field(description="with a case whose reproduction settled a category, that category: a "
                                      "reading of text alone does not overturn it (see readings)")
    secondary: list[str]
    confidence: float = Field(description="1.0 when the category is the one the case's reproduction settled by "
                                          "running it; else how sure the reading of the text is")
    readings: list[Reading] = Field(default_factory=list, description=(
        "set when the text alone reads otherwise than the category the case's reproduction settled: both "
        "readings, the reproduction's first (it stands)"))
    evidence: list[EvidenceLineOut] = Field(description="verbatim lines that decided it, with 1-based line numbers")
    compile_mode: str | None = Field(None, description="torch.compile, strict_export or non_strict_export, if visible")
    phase: str | None = Field(None, description="trace, backend_compile or runtime, if visible")
    exception_type: str | None = None
    signature: str | None = None
    suspects: list[Suspect] = Field(default_factory=list, description=(
        "where in torch's source to look, most likely first (file relative to the torch checkout): with a case, "
        "localize's suspects when it found some; then, for an exception raised inside torch, its innermost torch "
        "frames that are not compile plumbing"))
    diagnostic: str = Field(description="the diagnostic to run next, as an exact tool call; with a case, never one "
                                        "the case has already run (then the workflow's next call)")
    similar_reports: list[SimilarReportOut] = Field(default_factory=list, description=(
        "labelled public reports whose error text reads most like this one (similarity >= 0.6, closest first): "
        "possibly the same bug, already reported or fixed; their label is not evidence for this text's"))
    guide: CategoryGuide
    recorded: bool = Field(description="recorded as the case's classification")
    next_step: str


class _Input(NamedTuple):
    """What classify_error reads: the text, and for a run of a case, that run's case, exit, signal and script."""

    case_id: str | None
    text: str
    exit_code: int | None = None
    signal_name: str | None = None
    script: str | None = None


async def classify_error(
    state: AppState, case_id: str | None = None, text: str | None = None, run_id: str | None = None,
) -> ClassifyResult:
    """Classify error text or a run's stderr; with a case, record it as the case's classification."""
    from pt2_bug_basher.analysis.classify import classify

    given = _input(state, case_id, text, run_id)
    # in a worker thread: the learned model (the last guess, and similar reports) is fitted once per process
    result = await anyio.to_thread.run_sync(
        functools.partial(classify, given.text, exit_code=given.exit_code, signal_name=given.signal_name))
    similar = await anyio.to_thread.run_sync(similar_reports, given.text)
    out = _reading(state, result, similar, given.text)
    if given.case_id is None:
        return await _from_paste(state, out, result, given)
    return await _for_case(state, given.case_id, out, result, given, run_id)


def _input(state: AppState, case_id: str | None, text: str | None, run_id: str | None) -> _Input:
    """The text to classify: the one given, or the run's stderr (with the run's case when none is given)."""
    if (text is None) == (run_id is None):
        raise InvalidInput("pass exactly one of text (the error output) or run_id (a run of the case).")
    if run_id is None:
        return _Input(case_id, text or "")
    run = state.store.get_run(run_id, case_id)
    return _Input(case_id or run.case_id,
                  Path(run.stderr_path).read_text(errors="replace") if run.stderr_path else "",
                  run.exit_code, run.signal, script_of(run.argv))


def _reading(state: AppState, result: Classification, similar: list[SimilarReport], text: str) -> ClassifyResult:
    """The text's reading as a result, before a case or a paste decides its diagnostic and next step."""
    failure = result.failure
    return ClassifyResult(
        category=result.category, secondary=list(result.secondary), confidence=result.confidence,
        evidence=[EvidenceLineOut(line_no=e.line_no, text=e.text, rule=e.rule) for e in result.evidence],
        compile_mode=result.compile_mode, phase=result.phase,
        exception_type=failure.exception_type if failure else None,
        signature=failure.signature if failure else None,
        suspects=exception_suspects(text) if result.category != "accuracy" else [],
        similar_reports=[SimilarReportOut(url=r.url, label=r.label, subcategory=r.subcategory,
                                          similarity=r.similarity) for r in similar],
        diagnostic="", guide=guide(result.category, _layer_named(result), _torch_checkout(state.config.default_repo)),
        recorded=False, next_step="",
    )


async def _from_paste(state: AppState, out: ClassifyResult, result: Classification, given: _Input) -> ClassifyResult:
    """Without a case: the diagnostic and the calls that lead to it, with what the paste itself says first."""
    from pt2_bug_basher.analysis.classify import guessed

    # the paste parsed once, in a worker thread: whose code raised, and which environment it ran in
    facts = await anyio.to_thread.run_sync(_paste_facts, given.text, result.category)
    lone_guess = facts.lone and (guessed(result) or result.category == "unknown")
    _paste_diagnostic(out, result, facts, lone_guess, given.script)
    out.next_step = _paste_next_step(result, facts, lone_guess, out.diagnostic)
    designed = _by_design(result)
    if designed is not None:
        out.guide = _by_design_guide(out.guide, designed, _torch_checkout(state.config.default_repo))
        out.next_step = ("Only if the script's view does not overlap, debug the compiler: "
                         + out.next_step[:1].lower() + out.next_step[1:])
    out.next_step = (_caveat(result) + _rule_note(result, given.text) + _own_backend_note(facts.backend)
                     + (OWN_KERNEL_NOTE if facts.own_kernel else "")
                     + _known_report_note(out.similar_reports, given.text, by_design=designed is not None)
                     + out.next_step)
    if "<repro.py>" in out.next_step:
        out.next_step += (" (<repro.py>: the script that fails this way; for a pasted error without one, write "
                          "a small script from the report first)")
    return out


def _paste_diagnostic(out: ClassifyResult, result: Classification, facts: _PasteFacts, lone_guess: bool,
                      script: str | None) -> None:
    """A paste's diagnostic: the reproduction first where the script's own code raised or a lone line does not
    say whose did; else the category's, with suspects of a torch not on this machine said to be its own."""
    if facts.backend is not None or facts.own_kernel or lone_guess:
        # the script's own code failed, or a lone line does not say whose code did: the reproduction's verdict
        # settles whose bug it is before any of the compiler's diagnostics, and no guide of a category applies
        out.diagnostic = format_call(ToolName.run_with_logs, case_id="<case_id>", script=script or "<repro.py>",
                                     repeat=2)
        out.suspects = []
        out.guide = out.guide.model_copy(update={
            "source_files": [facts.backend.file] if facts.backend else [], "test_files": [], "not_present": [],
            "config_knobs": [], "minify_level": None, "minify_after": None, "minify_mode": None,
            "outside_graph": None, "log_preset": None})
        if facts.own_kernel:
            out.phase = None
        return
    out.diagnostic = _reproducing_diagnostic(result.category, script)
    if facts.python is None:  # the traceback's torch is not on this machine: its line numbers are its own
        out.suspects = [s.model_copy(update={"why": f"{s.why}; line {s.line} of the pasted traceback's "
                                                    "torch, which may differ from this checkout's"})
                        for s in out.suspects]


def _paste_next_step(result: Classification, facts: _PasteFacts, lone_guess: bool, diagnostic: str) -> str:
    """The calls that lead from a paste to its diagnostic."""
    if lone_guess:
        return LONE_LINE_NOTE + _opening(facts.python) + f", then reproduce: {diagnostic}"
    if result.category == "unknown":
        return ("The text shows no known failure pattern. Pass the full stderr (the last exception and "
                "the lines before it), or reproduce it with run_with_logs and classify the run_id.")
    if facts.backend is not None or facts.own_kernel:
        return _opening(facts.python) + f", then reproduce: {diagnostic}"
    return _without_a_case(result.category, diagnostic, facts.python)


async def _for_case(state: AppState, case_id: str, out: ClassifyResult, result: Classification, given: _Input,
                    run_id: str | None) -> ClassifyResult:
    """With a case: the category its reproduction settled stands, recorded; the guide takes localize's
    suspects and layer; the diagnostic is one the case has not run yet."""
    case = state.store.get_case(case_id)
    current = await anyio.to_thread.run_sync(lambda: state.workflow(case_id).current_script())
    script = given.script or current
    category = _settle(state, case_id, out, result, given, current)
    _record_classification(state, case_id, out, result, category, run_id)
    playbook = _case_guide(state, case, out, result, category)

    def from_state() -> tuple[str, str]:  # in a worker thread: the workflow may hash the tree
        flow = state.workflow(case_id)
        status = flow.status()
        return next_diagnostic(state, flow, status, playbook, script), status.next_step

    out.diagnostic, out.next_step = await anyio.to_thread.run_sync(from_state)
    disagreement = (f"The reproduction settled {category} by running the case (compiled and with compilation "
                    f"off); this text alone reads {result.category}, which does not overturn it. "
                    if out.readings else "")
    out.next_step = disagreement + ("" if out.readings else _caveat(result)) + _rule_note(result, given.text) \
        + out.next_step
    return out


def _settle(state: AppState, case_id: str, out: ClassifyResult, result: Classification, given: _Input,
            current: str | None) -> str:
    """The case's category: the one its reproduction settled by running it, over a text that reads otherwise
    (both readings kept); else the text's."""
    settled = _settled_category(state, case_id, given.script, current)
    if settled is None or settled == result.category:
        return result.category
    # the reproduction ran the case with and without compilation: a reading of text cannot overturn it
    out.readings = [Reading(source="reproduction", category=settled),
                    Reading(source="text", category=result.category, confidence=result.confidence)]
    out.category = settled
    out.confidence = 1.0
    out.suspects = exception_suspects(given.text) if settled != "accuracy" else []
    return settled


def _record_classification(state: AppState, case_id: str, out: ClassifyResult, result: Classification,
                           category: str, run_id: str | None) -> None:
    summary = (f"{category} (settled by the reproduction; the text alone reads {result.category} at "
               f"{result.confidence:.2f})" if out.readings else f"{category} (confidence {result.confidence:.2f})")
    state.store.add_evidence(
        case_id, Step.classify.value, category != "unknown",
        summary + (f", also {', '.join(result.secondary)}" if result.secondary else ""),
        data=ClassifyEvidence(
            category=category, secondary=list(result.secondary),
            evidence=[EvidenceLineRecord(line_no=e.line_no, text=e.text, rule=e.rule) for e in result.evidence],
            compile_mode=result.compile_mode, phase=result.phase,
            text_category=result.category if out.readings else None),
        run_id=run_id,
    )
    out.recorded = True


def _case_guide(state: AppState, case: CaseRecord, out: ClassifyResult, result: Classification,
                category: str) -> str:
    """localize's suspects first and the guide of the case's category and layer; the playbook to follow."""
    localized = state.store.localization(case.case_id)
    layer = layer_of(localized) or _layer_named(result)  # localize's layer, else the one the text names
    if localized is not None and localized.suspects:  # localize's bisection outranks frames of a wrapped error
        known = {(t.file, t.line) for t in localized.suspects}
        out.suspects = [*localized.suspects, *(s for s in out.suspects if (s.file, s.line) not in known)]
    out.guide = guide(category, layer, Path(case.repo))
    if (designed := _by_design(result)) is not None:
        out.guide = _by_design_guide(out.guide, designed, Path(case.repo))
    elif localized is not None and localized.suspects:  # the files localize pointed at come first
        named = [s.file for s in localized.suspects if s.file.endswith(".py") and (Path(case.repo) / s.file).is_file()]
        out.guide.source_files = list(dict.fromkeys([*named, *out.guide.source_files]))
    return focus(category, layer).playbook


# a reproduction that recorded these settled no category
_UNSETTLED = {None, "unknown"}


def _settled_category(state: AppState, case_id: str, ran: str | None, current: str | None) -> str | None:
    """The category the case's latest successful reproduction settled by running it, if any, for a run of the
    case's own repro (the reproduced or the current script; None: text, not a run)."""
    records = state.store.evidence(case_id, Step.reproduce.value)
    found = next((r.payload(ReproduceEvidence) for r in reversed(records) if r.ok), None)
    if found is None or found.category in _UNSETTLED:
        return None
    if ran is not None and not _same_script(ran, {found.script, current}):
        return None  # another script's run: its own reading stands
    return found.category


def _same_script(ran: str, ours: set[str | None]) -> bool:
    resolved = {str(Path(s).resolve()) for s in ours if s}
    return str(Path(ran).resolve()) in resolved


# rules whose line names the layer that raised, whatever wrapped it (a BackendCompilerFailed names the backend)
_LAYER_OF_RULE = {"functionalization_refused": "AOTAutograd"}


class ByDesign(BaseModel):
    """A rule whose match is a refusal by design, not a miscompile: what to say first, and the files that
    implement the refusal (in place of the category's, which are about compiler bugs)."""

    note: str
    source_files: list[str]
    test_files: list[str]


_BY_DESIGN = {
    "functionalization_refused": ByDesign(
        note=("Functionalization refuses this by design: an in-place op on a view whose elements overlap (unfold "
              "with a step smaller than its window, expand) has no well-defined functional form, so torch.compile "
              "bans it (aten/src/ATen/FunctionalInverses.cpp raises it). The script's fix is to clone() the view "
              "before mutating it, or to use the out-of-place op; it is a compiler bug only if the mutated view "
              "does not overlap. "),
        source_files=["torch/_subclasses/functional_tensor.py", "torch/_functorch/_aot_autograd/functional_utils.py"],
        test_files=["test/test_functionalization.py", "test/functorch/test_aotdispatch.py"]),
}


def _by_design(result: Classification) -> ByDesign | None:
    return next((_BY_DESIGN[e.rule] for e in result.evidence if e.rule in _BY_DESIGN), None)


# an unbacked symbol (u0, u12) inside a symbolic expression, a fake tensor's size or an op's arguments
_UNBACKED = re.compile(r"(?:[(\[,=:]\s*|\b(?:Eq|Ne|Max|Min|Mod)\()(u\d+)\b(?!\.)")


def _rule_note(result: Classification, text: str = "") -> str:
    found = _by_design(result)
    if found is not None:
        return found.note
    if result.category == "dynamic_shapes" and (unbacked := _UNBACKED.search(text)):
        name = unbacked.group(1)
        return (f"{name} is an unbacked symbol: a size or value the program reads from data (.item(), .tolist(), "
                "nonzero(), ...), which the compiler cannot guard on. torch._check(...) on it in the script tells "
                "the compiler what holds; a fix in torch makes the op or its meta function need no guard on it. ")
    return ""


def _by_design_guide(current: CategoryGuide, found: ByDesign, repo: Path | None) -> CategoryGuide:
    """The guide of a refusal by design: the files that implement it, and none of the compiler's debugging knobs."""
    knobless = current.model_copy(update={"config_knobs": [], "minify_level": None, "minify_after": None,
                                          "minify_mode": None, "outside_graph": None})
    return with_files(knobless, found.source_files, found.test_files, repo)


def _layer_named(result: Classification) -> str | None:
    """The layer the text itself names, for the guide before localize has run: functionalization's refusal is
    AOTAutograd's, though it reaches the user wrapped as the backend's failure."""
    return next((_LAYER_OF_RULE[e.rule] for e in result.evidence if e.rule in _LAYER_OF_RULE), None)


def _torch_checkout(repo: Path) -> Path | None:
    """The server's default repository when it is a PyTorch checkout, whose files the guide can name; elsewhere
    (a user's project, any folder) the guide names upstream PyTorch's paths."""
    return repo if (repo / "torch" / "__init__.py").is_file() else None


class _PasteFacts(NamedTuple):
    """From a pasted traceback: the frame of the script's own backend that raised, whether a Triton kernel the
    script launched itself failed, the environment it ran in when that is on this machine, and whether it is an
    exception line without a frame."""

    backend: Frame | None
    own_kernel: bool
    python: Path | None
    lone: bool


def _paste_facts(text: str, category: str) -> _PasteFacts:
    """The paste's facts, parsed once."""
    parsed = parse(text)
    frames = [f.file for f in parsed.all_frames()]
    return _PasteFacts(own_backend_frame(parsed), category == "triton" and triton_outside_torch(parsed),
                       interpreter_of_frames(frames), parsed.final_exc is not None and not frames)


LONE_LINE_NOTE = ("A lone exception line does not say whose code raised it (the script's own check, a shape check "
                  "in a meta function, or the compiler): reproduce first. The reproduction runs the script with "
                  "compilation off too, which tells a compiler bug from the script's own error, and its traceback "
                  "decides the category. ")


def _reproducing_diagnostic(category: str, script: str | None) -> str:
    """The category's diagnostic before any reproduction: a run_with_logs diagnostic runs twice, so that it
    completes the reproduction too."""
    found = (PLAYBOOKS.get(category) or PLAYBOOKS["unknown"]).diagnostic
    if found.tool != ToolName.run_with_logs or "repeat" in found.arguments:
        return diagnostic_call(category, None, script)
    return format_call(found.tool, case_id="<case_id>", script=script or "<repro.py>", **found.arguments, repeat=2)


def _opening(python: Path | None) -> str:
    """Opening a case, in the traceback's environment when that is on this machine."""
    if python is None:
        return f"Open a case with {format_call(ToolName.check_env)} (it returns the case_id)"
    return (f"The traceback's torch is installed in the environment of {python}, on this machine: open a "
            f"case there with {format_call(ToolName.check_env, python=str(python))} (it returns the case_id)")


def _without_a_case(category: str, diagnostic: str, python: Path | None = None) -> str:
    """The calls that lead to the diagnostic from text alone: a case first (in the traceback's environment
    when that is on this machine), and a reproduction unless the diagnostic run is the reproduction
    (run_with_logs records one)."""
    tool = (PLAYBOOKS.get(category) or PLAYBOOKS["unknown"]).diagnostic.tool
    opening = _opening(python)
    if tool == ToolName.run_with_logs:
        return f"{opening}, then run the diagnostic, which also reproduces the failure: {diagnostic}"
    reproduce = format_call(ToolName.run_with_logs, case_id="<case_id>", script="<repro.py>", repeat=2)
    return f"{opening}, reproduce with {reproduce}, then run the diagnostic: {diagnostic}"


KNOWN_REPORT_SIMILARITY = 0.9  # about the same text: the same error, reported before
# ... and enough words to say so: three printed tensors read like any other three printed tensors
KNOWN_REPORT_MIN_WORDS = 12


def _known_report_note(reports: list[SimilarReportOut], text: str, *, by_design: bool = False) -> str:
    """A paste that reads like a labelled public report almost word for word: read that report first."""
    if not reports or reports[0].similarity < KNOWN_REPORT_SIMILARITY:
        return ""
    if len(set(re.findall(TOKEN_PATTERN, text))) < KNOWN_REPORT_MIN_WORDS:
        return ""
    top = reports[0]
    why = ("it discusses the same refusal" if by_design
           else "the bug may be known or fixed in a newer torch")
    return (f"This text reads almost word for word like {top.url} (similarity {top.similarity:.2f}, diagnosed "
            f"{top.label}): read that report first, {why}. ")


OWN_KERNEL_NOTE = ("No frame of torch in the traceback: the Triton kernel was launched by the script's own code "
                   "(through triton's runtime), not by code Inductor generated, so its fix is in that kernel or its "
                   "launch and autotune configs, not in PyTorch's compiler. ")


def _own_backend_note(frame: Frame | None) -> str:
    """A failure raised in the script's own backend is most likely that backend's bug: say so first."""
    if frame is None:
        return ""
    return (f"The exception is raised in the script's own backend {frame.function} ({frame.file}:{frame.line}), "
            "which torch.compile only hands the captured graph: most likely a bug of that backend, not of "
            "PyTorch's compiler; the reproduction's verdict settles it. ")


def _caveat(result: Classification) -> str:
    """A category guessed (the fallback's or the learned guess), or resting only on where a cut traceback stops,
    says so before any next step."""
    from pt2_bug_basher.analysis.classify import guessed

    exception = result.failure.exception_type if result.failure is not None else None
    rules = sorted({e.rule for e in result.evidence})
    if not guessed(result) and exception is None and rules and all(r.startswith("frames:") for r in rules):
        both = (" A traceback cut in Dynamo's tracer stops there for a graph break and for a Dynamo internal error "
                "alike." if "frames:dynamo_trace" in rules else "")
        return (f"The category rests only on where the traceback stops ({', '.join(rules)}; confidence "
                f"{result.confidence:.2f}): the text holds no exception line, and the run's own exception decides."
                f"{both} ")
    if not guessed(result):
        return ""
    why = (f"no rule knows its exception ({exception.rsplit('.', 1)[-1]})" if exception
           else "it holds no exception line")
    return (f"The category is a guess (confidence {result.confidence:.2f}): {why}; the evidence lines weighed most. "
            "The diagnostic run confirms or refutes it. ")


def script_of(argv: list[str]) -> str | None:
    """The script a recorded run ran: after `--` for the server's own launchers, none for `python -m ...`."""
    if len(argv) < 2:
        return None
    if Path(argv[1]).parent == PROBES and "--" in argv[2:]:
        rest = argv[argv.index("--", 2) + 1:]
        return rest[0] if rest else None
    return None if argv[1].startswith("-") else argv[1]


def next_diagnostic(state: AppState, flow: Workflow, status: CaseStatus, playbook: str, script: str | None) -> str:
    """The playbook's diagnostic, unless the case has already run it; then the workflow's next call."""
    found = PLAYBOOKS[playbook].diagnostic
    call = diagnostic_call(playbook, flow.case.case_id, script)
    if not _diagnostic_done(state, flow, found.tool, found.arguments):
        return call
    pending = [s for s in status.steps if s.status not in CLOSED and s.status != "agent"]
    if pending:
        return pending[0].tool_call
    return format_call(ToolName.get_workflow, case_id=flow.case.case_id)


def _diagnostic_done(state: AppState, flow: Workflow, tool: ToolName, arguments: dict) -> bool:
    case_id = flow.case.case_id
    if tool == ToolName.localize:
        return flow.localization is not None
    if tool == ToolName.minify:
        return flow.is_complete(Step.reduce)
    if tool != ToolName.run_with_logs:
        return False
    from pt2_bug_basher.analysis.torch_logs import PRESETS

    wanted = dict(arguments.get("env") or {})
    if "logs" in arguments:
        wanted["TORCH_LOGS"] = PRESETS.get(str(arguments["logs"]), str(arguments["logs"]))
    return any(all(run.env.get(key) == value for key, value in wanted.items())
               for run in state.store.runs(case_id))
