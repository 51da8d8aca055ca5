"""The one judgement "is this the same failure as the case's?", for every step that makes it.

A `Failure` is what one run or test showed (failed or not, signature, category, exception type and
message; for runs also the signal and the graph breaks in the logs), or what the case recorded as
its failure. `same_failure(seen, wanted, rules)` answers at the strictest level that holds:

* ``signature`` — the exact failure signature (exception, message head, user and torch frames);
* ``exception`` — the same exception. Reruns of the repro script (localize, minify) need the same
  type and the same normalised message, backend names and quoting taken out (the torch frame
  differs between backends, a minified repro has other frames); a test needs the same type;
* ``assertion`` — a new test that asserts on a soft failure (graph break, recompile, accuracy);
* ``category`` — the same category alone, where the caller accepts it.

`Rules` holds what legitimately differs between the callers; the presets name them:
`CANDIDATE` (the source reducer's candidates and result; `EXPORT_CANDIDATE` where the script reaches the
compiler through torch.export alone), `TRIAL` (localize's rungs, the bisector's
trials, the minimality judge's run), `FX_RESULT` (PyTorch's minifier's repro), `RERUN` /
`RERUN_OR_ACCURACY` (runs of the script without the launcher's report), `new_test(...)` (register_test: the test against
the reproduction), `on_other_ref(...)` (make_worktree: the registered test on another ref against
the same test on the agent's tree), `script_on_other_ref(...)` (run_with_logs on main: the repro
script there against the reproduction).

`Oracle` is the one entry point for "this run reproduces the case": the reducers, the minimality
judge, the bisector and localize judge their runs with `Oracle.judge` (and a reduction's result with
`Oracle.confirm`, which also reads a run with compilation off). Beyond `same_failure` it holds:

* a run reproduces only after a compiled call: launcher.py reports Dynamo's counters when the script
  ends (`PT2BB-COMPILED:`); no frame Dynamo began converting (nor a graph a backend compiled, for the
  FX minifier's repros) means nothing compiled, and a run without the report proves nothing;
* an accuracy failure is the script's own comparison: its exception is raised by the script's file
  (through torch.testing, unittest or numpy.testing helpers), after a frame was converted; one raised
  in generated code, in torch or elsewhere is another failure;
* where the case passed with compilation off, a run with compilation off must not fail the case's way.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.failure import normalise_message, normalise_numbers, parse, raised_in
from pt2_bug_basher.domain.process import RunOutput

# Exceptions that say a test itself is broken (typo, missing import) rather than hitting the bug.
TEST_BUG_EXCEPTIONS = {"NameError", "ImportError", "ModuleNotFoundError", "SyntaxError", "IndentationError",
                       "UnboundLocalError", "TabError"}
# Failures a test shows as an assertion of its own rather than as the reproduction's exception.
SOFT_CATEGORIES = ("graph_break", "recompile", "accuracy")
SOFT_SIGNATURE = "graph_breaks|"

_BACKEND_WORDS = re.compile(
    r"\b(?:aot_eager_decomp_partition|aot_eager|aot_inductor|inductor|eager|cudagraphs|"
    r"relu_\w+_TESTING_ONLY)\b"
)

Level = Literal["signature", "exception", "assertion", "category"]
COMPILED_MARK = "PT2BB-COMPILED:"  # the line launcher.py prints when the script ends
_COMPILED_LINE = re.compile(rf"^{COMPILED_MARK} (\{{.*\}})\s*$", re.M)


def short_type(name: str | None) -> str | None:
    """`torch._dynamo.exc.Unsupported` -> `Unsupported`."""
    return name.rsplit(".", 1)[-1] if name else None


def exception_key(exception_type: str | None, message: str | None) -> str:
    """Exception type (last component) + the first line of the normalised message, backend names out."""
    first = next((line for line in (message or "").splitlines() if line.strip()), "")
    norm = _BACKEND_WORDS.sub("<backend>", normalise_message(first))
    norm = re.sub(r"['\"`]", "", norm)[:200]
    return f"{short_type(exception_type) or ''}|{norm}"


class Compiled(BaseModel):
    """What compiled before the script ended, as launcher.py reported it."""

    frames: int = Field(0, description="frames Dynamo began converting")
    frames_ok: int = Field(0, description="frames Dynamo converted")
    backend_compiles: int = Field(0, description="captured graphs a backend compiled")

    @property
    def any(self) -> bool:
        return self.frames > 0 or self.backend_compiles > 0


class Raiser(BaseModel):
    """Where the final exception was raised: the frame that decides whose code raised it."""

    file: str
    in_torch: bool
    generated: bool = Field(description="the exception passed through code the compiler generated")


class Failure(BaseModel):
    """What a run or a test showed, or the failure a case recorded."""

    failed: bool = True
    signature: str | None = None
    category: str | None = None
    secondary: list[str] = Field(default_factory=list, description="other categories the classifier saw")
    exception_type: str | None = None
    message: str | None = None
    frame: str | None = Field(None, description="a test's first relevant frame")
    exit_code: int | None = None
    signal: str | None = None
    timed_out: bool = False
    graph_break_reasons: list[str] = Field(default_factory=list)
    compiled: Compiled | None = Field(None, description="launcher.py's report; None: the run made none")
    raised_by: Raiser | None = None

    @property
    def key(self) -> str:
        return exception_key(self.exception_type, self.message)

    @property
    def soft(self) -> bool:
        """A failure that only shows in the logs (graph breaks with exit 0)."""
        return bool(self.signature and self.signature.startswith(SOFT_SIGNATURE))

    @classmethod
    def recorded(cls, evidence: object | None) -> Failure:
        """The failure a step recorded (reproduction or registered test evidence); none: nothing known."""
        fields = ("signature", "category", "exception_type", "message")
        return cls(**{name: getattr(evidence, name, None) for name in fields})


def run_failure(result: RunOutput) -> Failure:
    """The failure a run of a script shows, by run_with_logs' own rules."""
    from pt2_bug_basher.analysis.verdict import RunVerdict

    parsed = RunVerdict(result)
    f = parsed.classification.failure
    outcome = result.outcome
    return Failure(
        failed=parsed.failed, signature=parsed.signature, category=parsed.classification.category,
        exception_type=f.exception_type if f else None, message=(f.message or "")[:2000] if f else None,
        exit_code=outcome.exit_code, signal=outcome.signal_name, timed_out=outcome.timed_out,
        graph_break_reasons=sorted({normalise_message(b.reason)[:120] for b in parsed.logs.graph_breaks}),
        compiled=compiled_report(parsed.stderr), raised_by=raiser(parsed.stderr) if parsed.failed else None,
    )


def compiled_report(stderr: str) -> Compiled | None:
    """The last `PT2BB-COMPILED:` report in a run's stderr (None: there is none)."""
    found = _COMPILED_LINE.findall(stderr)
    if not found:
        return None
    try:
        return Compiled.model_validate(json.loads(found[-1]))
    except ValueError:
        return None


def raiser(stderr: str) -> Raiser | None:
    """Where the final exception was raised, by the frame that decides whose code raised it (failure.raised_in)."""
    found = raised_in(parse(stderr))
    if found is None:
        return None
    kind, frame = found
    return Raiser(file=frame.file, in_torch=kind == "torch", generated=kind == "compiled_code")


def describe(failure: Failure) -> str:
    if failure.timed_out:
        return "timed out"
    if not failure.failed:
        return "passes"
    return failure.signature or failure.category or "failed"


@dataclass(frozen=True)
class Rules:
    """Where the callers of `same_failure` legitimately differ."""

    reruns: bool = False
    """Both sides are runs of the repro script: an exception matches only with the same normalised
    message, and a case failure that shows only in the logs (graph breaks), died by a signal or
    raised nothing is judged on the logs, the signal and the message. Otherwise the seen side is a
    test: the exception type is enough, and an exception saying the test itself is broken
    (NameError, ImportError, ...) never matches."""
    category_needed: bool = False
    """A signature or exception match also needs a related category (the same one, or one the
    classifier saw besides the main one; a case failure without a category is related to any)."""
    category_alone: Literal["never", "accuracy", "known"] = "never"
    """When the same category matches on its own: never, for accuracy failures only (their checkers
    differ: assert_close in a script, AccuracyError in PyTorch's repro), or for any known category."""
    test_file: str | None = None
    """A new test in this file: against a case failure without an exception, any exception of a
    related category matches; against a soft failure, an AssertionError raised in this file does."""
    seen_as: str = "the run"
    wanted_as: str = "the case's failure"
    compiled_call: bool = False
    """The run must report a compiled call before it ended (launcher.py's `PT2BB-COMPILED:` line);
    a run without the report, or with nothing compiled, does not reproduce."""
    own_check: bool = False
    """An accuracy case's failure must be the script's own comparison: the exception is raised in the
    script's file, after Dynamo converted a frame."""
    through_export: bool = False
    """The case reaches the compiler through torch.export alone (no torch.compile of the script's): Dynamo's
    counters prove nothing (an eager torch.cond converts frames of its own), so no compiled call is asked for,
    and an own check is judged by where it was raised."""


RERUN = Rules(reruns=True)
RERUN_OR_ACCURACY = Rules(reruns=True, category_alone="accuracy")
CANDIDATE = Rules(reruns=True, compiled_call=True, own_check=True)
EXPORT_CANDIDATE = Rules(reruns=True, own_check=True, through_export=True)
TRIAL = Rules(reruns=True, category_alone="accuracy", compiled_call=True, own_check=True)
# PyTorch's minifier writes the repro and its checker (AccuracyError in torch): no own comparison to ask for
FX_RESULT = Rules(reruns=True, category_alone="accuracy", compiled_call=True)
# With compilation off nothing compiles: the run is judged on its failure alone
_COMPILE_OFF = Rules(reruns=True, category_alone="accuracy", seen_as="with compilation off the run")


def new_test(test_file: str) -> Rules:
    """register_test: the new test's failure against the reproduction's."""
    return Rules(category_needed=True, test_file=test_file, seen_as="the test", wanted_as="the reproduction")


def on_other_ref(ref: str) -> Rules:
    """make_worktree: the registered test on another ref against its failure on the agent's tree."""
    return Rules(category_alone="known", seen_as=f"on {ref} the test", wanted_as="on your tree it")


def script_on_other_ref(ref: str) -> Rules:
    """run_with_logs where="main": the repro script run on another ref against the case's reproduction."""
    return Rules(reruns=True, seen_as=f"on {ref} the script", wanted_as="on your tree it")


class Match(BaseModel):
    level: Level | None = Field(description="how the failure matched; None: it does not")
    reason: str

    @property
    def matches(self) -> bool:
        return self.level is not None


def same_failure(seen: Failure, wanted: Failure, rules: Rules = RERUN) -> Match:
    """Does `seen` fail the way `wanted` does, and at which level (see the module's docstring)?"""
    if seen.timed_out or not seen.failed:
        return Match(level=None, reason=f"{rules.seen_as} {describe(seen)}")
    seen_type, wanted_type = short_type(seen.exception_type), short_type(wanted.exception_type)
    shown = (f"{rules.seen_as} failed with {seen.exception_type or 'no exception'} ({seen.category}): "
             f"{(seen.message or '')[:200]!r}")
    expected = f"{rules.wanted_as} failed with {wanted.exception_type or 'no exception'} ({wanted.category})"
    if not rules.reruns and seen_type in TEST_BUG_EXCEPTIONS and seen_type != wanted_type:
        where = f" at {seen.frame}" if seen.frame else ""
        return Match(level=None, reason=(f"{shown}{where}: that is a mistake in the test itself (a typo, a missing "
                                         f"import or a name missing where it ran), not the bug; {expected}"))
    related = (not rules.category_needed or wanted.category is None or seen.category == wanted.category
               or wanted.category in seen.secondary)
    in_category = f"same category ({seen.category}) and " if rules.category_needed else ""
    if wanted.signature and seen.signature == wanted.signature and related:
        return Match(level="signature", reason=f"{in_category}the same failure signature")
    if rules.reruns:
        level = _rerun_exception(seen, wanted)
        if level is not None or wanted.soft or _untyped(wanted):
            return Match(level=level, reason=f"{in_category}the same {level}" if level else f"{shown}; {expected}")
    elif related and wanted_type and seen_type == wanted_type:
        return Match(level="exception", reason=f"{in_category}the same exception type {seen_type}")
    elif related and rules.test_file and not wanted_type and seen_type:
        return Match(level="exception", reason=f"{in_category}{rules.wanted_as} raised no exception")
    if (rules.test_file and wanted.category in SOFT_CATEGORIES and seen_type == "AssertionError" and seen.frame
            and rules.test_file in seen.frame):
        return Match(level="assertion", reason=(f"{rules.wanted_as} is a {wanted.category} problem and "
                                                f"{rules.seen_as} asserts on it (AssertionError in the test)"))
    alone = {"never": False, "accuracy": wanted.category == "accuracy",
             "known": bool(wanted.category) and wanted.category != "unknown"}[rules.category_alone]
    if alone and seen.category == wanted.category:
        return Match(level="category", reason=f"the same category ({seen.category})")
    if wanted.category not in (None, "unknown") and seen.category == wanted.category:
        return Match(level=None, reason=(f"{shown}; {expected}: same category but a different exception — "
                                         f"{rules.seen_as} may hit another failure"))
    return Match(level=None, reason=f"{shown}; {expected}")


def _rerun_exception(seen: Failure, wanted: Failure) -> Level | None:
    """The exception level between two runs of a script (a soft, signal or exception-less case failure
    is judged on the graph breaks, the signal or the message)."""
    if wanted.soft:
        reasons = _soft_reasons(wanted.signature)
        return "exception" if reasons and reasons <= set(seen.graph_break_reasons) else None
    if _untyped(wanted):
        if seen.signal and wanted.signature and wanted.signature.startswith(seen.signal):
            return "exception"
        if wanted.exception_type is None and seen.exception_type is None and wanted.message and seen.message \
                and exception_key(None, wanted.message) == exception_key(None, seen.message):
            return "exception"
        return None
    if seen.exception_type and seen.key == wanted.key:
        return "exception"
    return "assertion" if _own_assert(seen) and _own_assert(wanted) and \
        _data_free(seen.message) == _data_free(wanted.message) else None


def _own_assert(failure: Failure) -> bool:
    """An AssertionError the script raised itself (not torch, not generated code): its own check."""
    raised = failure.raised_by
    return short_type(failure.exception_type) == "AssertionError" and (
        raised is None or not (raised.in_torch or raised.generated))


_DATA_LITERAL = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\)")


def _data_free(message: str | None) -> str:
    """A script's own assertion message with the values it prints (numbers, dict, list and tuple reprs) left out:
    the check is the same when only the values it shows differ."""
    out = normalise_numbers(normalise_message((message or "").strip().split("\n", 1)[0]))
    while (shorter := _DATA_LITERAL.sub("<data>", out)) != out:
        out = shorter
    return out


def _untyped(failure: Failure) -> bool:
    """A failure with no exception to compare: a crash by signal, or nothing raised."""
    return failure.exception_type is None or (failure.signature or "").startswith("SIG")


def _soft_reasons(signature: str | None) -> set[str]:
    if not signature or not signature.startswith(SOFT_SIGNATURE):
        return set()
    return {part.rsplit("@", 1)[0] for part in signature[len(SOFT_SIGNATURE):].split(";") if part}


@dataclass(frozen=True)
class Oracle:
    """The one judgement "this run reproduces the case" (see the module's docstring).

    `wanted`: the case's failure; `rules`: the caller's preset; `script_name`: the file name whose
    own comparison an accuracy failure must be (the reducers keep the user's file name); `off_passes`:
    the case's run with compilation off passed, so a run with compilation off must not fail its way."""

    wanted: Failure
    rules: Rules
    script_name: str | None = None
    off_passes: bool = False

    def judge(self, result: RunOutput) -> Match:
        """One compiled run."""
        return self.judge_failure(run_failure(result))

    def fails_alike(self, seen: Failure) -> bool:
        """The case's failure by its signature alone: for a run with nothing to compile (torch.export as it is),
        which no compiled call can back."""
        return same_failure(seen, self.wanted, self.rules).matches

    def judge_failure(self, seen: Failure) -> Match:
        match = same_failure(seen, self.wanted, self.rules)
        if not match.matches:
            return match
        rules = self.rules
        if rules.compiled_call and (seen.compiled is None or not seen.compiled.any):
            why = "made no report of what compiled" if seen.compiled is None else "compiled nothing before it ended"
            return Match(level=None, reason=f"{rules.seen_as} {why}: without a compiled call it cannot reproduce "
                                            f"({match.reason} alone does not count)")
        if rules.own_check and self.wanted.category == "accuracy" and seen.exception_type:
            refused = self._not_own_check(seen)
            if refused:
                return Match(level=None, reason=f"{rules.seen_as} {refused}: not the script's own comparison of "
                                                "values compiled code produced")
        return match

    def _not_own_check(self, seen: Failure) -> str | None:
        if not self.rules.through_export and seen.compiled is not None and seen.compiled.frames_ok == 0 \
                and seen.compiled.backend_compiles == 0:
            return "raised before any compiled code ran"
        where = seen.raised_by
        if where is None:
            return "raised its exception from no frame it printed"
        if where.generated:
            return f"raised {short_type(seen.exception_type)} in generated code ({where.file})"
        if where.in_torch:
            return f"raised {short_type(seen.exception_type)} in torch ({where.file})"
        if self.script_name is not None and os.path.basename(where.file) != self.script_name:
            return f"raised {short_type(seen.exception_type)} in {where.file}, not in {self.script_name}"
        return None

    def judge_off(self, result: RunOutput) -> Match:
        """A run with compilation off: matches when it fails the case's way (then the compiled run proves nothing)."""
        return same_failure(run_failure(result), self.wanted, replace(_COMPILE_OFF, wanted_as=self.rules.wanted_as))

    def confirm(self, compiled: RunOutput, compile_off: RunOutput | None) -> Match:
        """A reduction's result: the compiled run reproduces and, where the case passed with compilation off,
        the run with compilation off does not fail the case's way."""
        match = self.judge(compiled)
        if not match.matches or compile_off is None or not self.off_passes:
            return match
        off = self.judge_off(compile_off)
        if off.matches:
            return Match(level=None, reason=(f"it fails the case's way with compilation off too (run "
                                             f"{compile_off.run_id}, {off.reason}): the failure is not the "
                                             "compiler's"))
        return Match(level=match.level, reason=f"{match.reason}; with compilation off it does not fail that way")
