"""The debugging method as one declarative table, and the gates derived from it.

A step is complete when the server holds passing evidence for it (observed by the server itself)
or an explicit waiver. Evidence for a step marked `current_tree` counts only while the repository
is in the state the evidence was taken on. Evidence for a step is stale when a step it builds on
got newer evidence since (a new test invalidates the check on main).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from pt2_bug_basher.case.store import EvidenceRecord, Store, WaiverRecord
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.digest import python_source_digest, test_function_of
from pt2_bug_basher.domain.errors import GateClosed, InvalidInput
from pt2_bug_basher.domain.evidence import (
    ClassifyEvidence,
    LogsEvidence,
    MainCheckEvidence,
    ReproduceEvidence,
    TestEvidence,
)
from pt2_bug_basher.domain.names import CLOSED, USER_ERROR, Step, StepState, ToolName

CASE: object = object()  # stands for the case's id in a step's arguments
REPRO, PRESET, RUN_ID = "<repro.py>", "<preset>", "<run_id>"  # slots the case fills once it has them


@dataclass(frozen=True)
class StepSpec:
    step: Step
    number: int
    title: str
    tool: ToolName | None
    arguments: tuple[tuple[str, object], ...]
    """The arguments of the call that produces this step's evidence: CASE for the case's id, `<...>` slots for
    what the case fills in later."""
    agent_does: str = ""
    """What the agent does in a step without a tool."""
    current_tree: bool = False
    rebased_on: tuple[Step, ...] = ()
    """Evidence older than the latest evidence of these steps no longer counts."""
    waivable: bool = True
    observed: bool = True
    """False for steps only the agent can do (root cause, fix); they carry no gate."""
    also: tuple[ToolName, ...] = ()
    """Tools that serve the step besides the one that records it (shown with it in the docs)."""
    note: str = ""
    """What the server instructions say about the step besides its title."""

    def opening(self, case_id: str, **filled: object) -> str:
        """The step's call for a case, with `filled` replacing (or adding) arguments."""
        if self.tool is None:
            return self.agent_does
        return format_call(self.tool, **{**self.call_arguments(case_id), **filled})

    def call_arguments(self, case_id: str) -> dict[str, object]:
        return {key: case_id if value is CASE else value for key, value in self.arguments}

    @property
    def tools(self) -> tuple[ToolName, ...]:
        """Every tool of the step, in the order they are used."""
        return (*self.also, *((self.tool,) if self.tool else ()))


STEPS: tuple[StepSpec, ...] = (
    StepSpec(Step.environment, 1, "Check the environment", ToolName.check_env,
             (("conda_env", "<env>"),), waivable=False),
    StepSpec(Step.reproduce, 2, "Reproduce reliably (same failure on every run)", ToolName.run_with_logs,
             (("case_id", CASE), ("script", REPRO), ("repeat", 2)), note="with repeat=2"),
    StepSpec(Step.reduce, 3, "Reduce to a minimal standalone repro", ToolName.minify,
             (("case_id", CASE), ("script", REPRO), ("mode", "auto")), also=(ToolName.localize,)),
    StepSpec(Step.test, 4, "Register a failing unit test in a topical test file", ToolName.register_test,
             (("case_id", CASE), ("test_file", "test/<area>/test_<topic>.py"),
              ("test_name", "<TestClass.test_name>")),
             note="never test/dynamo/test_misc.py, and BEFORE reading compiler code"),
    StepSpec(Step.main_check, 5, "Confirm the test fails on main in a worktree", ToolName.make_worktree,
             (("case_id", CASE), ("action", "create"), ("ref", "main")), rebased_on=(Step.test,),
             note="if it passes there: stop"),
    StepSpec(Step.logs, 6, "Collect logs (TORCH_LOGS)", ToolName.run_with_logs,
             (("case_id", CASE), ("script", REPRO), ("logs", PRESET)),
             note="with logs=<the category's preset>"),
    StepSpec(Step.classify, 7, "Classify the failure", ToolName.classify_error,
             (("case_id", CASE), ("run_id", RUN_ID))),
    StepSpec(Step.artifacts, 8, "Inspect TORCH_COMPILE_DEBUG artifacts", ToolName.collect_debug_artifacts,
             (("case_id", CASE), ("script", REPRO))),
    StepSpec(Step.root_cause, 9, "Find the root cause", None,
             (), agent_does="read the code the artifacts point at", observed=False),
    StepSpec(Step.fix, 10, "Fix it", None, (), agent_does="edit the source in the repository", observed=False),
    StepSpec(Step.verify, 11, "Verify: the new test and nearby tests pass", ToolName.run_tests,
             (("case_id", CASE),), current_tree=True),
    StepSpec(Step.review, 12, "Self-review the change", ToolName.review_changes,
             (("case_id", CASE),), current_tree=True, rebased_on=(Step.verify,)),
    StepSpec(Step.celebrate, 13, "Celebrate", ToolName.celebrate,
             (("case_id", CASE), ("root_cause", "..."), ("fix_summary", "...")), current_tree=True,
             waivable=False),
)

SPEC: dict[Step, StepSpec] = {spec.step: spec for spec in STEPS}

# What each gated tool requires before it runs. Tools absent here run without a gate.
TOOL_REQUIRES: dict[ToolName, tuple[Step, ...]] = {
    ToolName.run_with_logs: (Step.environment,),
    ToolName.localize: (Step.environment, Step.reproduce),
    ToolName.minify: (Step.environment, Step.reproduce),
    ToolName.register_test: (Step.environment, Step.reproduce, Step.reduce),
    ToolName.make_worktree: (Step.environment, Step.test),
    ToolName.collect_debug_artifacts: (Step.environment, Step.test, Step.main_check),
    ToolName.run_tests: (Step.environment, Step.test),
    ToolName.review_changes: (Step.environment, Step.test, Step.main_check, Step.verify),
    ToolName.celebrate: (Step.environment, Step.test, Step.main_check, Step.verify, Step.review),
}


class StepStatus(BaseModel):
    number: int
    step: Step
    title: str
    status: StepState = Field(description="done, waived, stale (code changed since), failed, stopped, pending or agent")
    evidence: str | None = Field(None, description="what the server observed, in one line")
    run_id: str | None = None
    tool_call: str = Field(description="the call that completes this step")


class Waiver(BaseModel):
    step: Step
    reason: str


class CaseStatus(BaseModel):
    case_id: str
    repo: str
    python: str
    steps: list[StepStatus]
    waivers: list[Waiver]
    stopped: str | None = Field(None, description="why the case is stopped, if it is")
    next_open: Step | None = Field(None, description="the step next_step leads to (none when stopped or complete)")
    next_step: str


def stopped_main(ref: str, case_id: str) -> str:
    return (f"the registered test passes on {ref}: the test may not capture the bug, or it is already fixed there. "
            "Register a new test that fails: "
            + format_call(ToolName.register_test, case_id=case_id, test_file="<test file>",
                          test_name="<TestClass.test_name>")
            + ", or, if you are sure, "
            + format_call(ToolName.waive_step, case_id=case_id, step=Step.main_check.value,
                          reason="<why the test is right>") + ".")


def stopped_user_error(script: str, case_id: str) -> str:
    return (f"{script} fails without torch.compile too (with TORCHDYNAMO_DISABLE=1): not a compiler bug. Fix the "
            "script (the error is in the program, not in the compiler), then reproduce again: "
            + format_call(ToolName.run_with_logs, case_id=case_id, script=script, repeat=2)
            + "; or, if the failure is the compiler's after all, "
            + format_call(ToolName.waive_step, case_id=case_id, step=Step.reproduce.value,
                          reason="<why the compiler is at fault>") + ".")


def stopped_own_backend(script: str, backend: str, case_id: str) -> str:
    return (f"{script} fails in its own backend {backend}: torch.compile hands that function the captured graph and "
            "it raises, so the bug is the backend's, not PyTorch's compiler's. Fix the backend, then reproduce "
            "again: " + format_call(ToolName.run_with_logs, case_id=case_id, script=script, repeat=2)
            + '; to check that the graph itself runs, compile with backend="aot_eager"; or, if PyTorch is at fault '
            "after all (the backend only reports it), "
            + format_call(ToolName.waive_step, case_id=case_id, step=Step.reproduce.value,
                          reason="<why PyTorch is at fault>") + ".")


TreeHashFn = Callable[[], str]


class Workflow:
    """Evaluates a case's steps from the store; tree_hash is computed lazily, at most once."""

    def __init__(self, store: Store, case_id: str, tree_hash: TreeHashFn) -> None:
        self.store = store
        self.case = store.get_case(case_id)
        self._tree_hash_fn = tree_hash
        self._tree_hash: str | None = None
        self._evidence = store.evidence(case_id)
        self._waivers = store.waivers(case_id)
        self.localization = store.localization(case_id)
        """what localize found, if it ran"""

    @property
    def tree_hash(self) -> str:
        if self._tree_hash is None:
            self._tree_hash = self._tree_hash_fn()
        return self._tree_hash

    def latest(self, step: Step) -> EvidenceRecord | None:
        for record in reversed(self._evidence):
            if record.step == step.value:
                return record
        return None

    def latest_ok(self, step: Step) -> EvidenceRecord | None:
        for record in reversed(self._evidence):
            if record.step == step.value and record.ok:
                return record
        return None

    def waiver(self, step: Step) -> WaiverRecord | None:
        for waiver in reversed(self._waivers):
            if waiver.step == step.value:
                return waiver
        return None

    def _test_changed_since(self, record: EvidenceRecord) -> bool:
        """A main check ran an earlier content of the registered test (its file edited after the check, other tests
        of the file aside)."""
        found = record.payload(MainCheckEvidence)
        if not found.test_file or not found.test_sha256:
            return False
        test = test_function_of(found.node_id)
        return python_source_digest(Path(self.case.repo) / found.test_file, test) != found.test_sha256

    def _rebased(self, spec: StepSpec, record: EvidenceRecord) -> bool:
        for base in spec.rebased_on:
            newest = self.latest(base)
            if newest is not None and newest.id > record.id:
                return True
        return False

    def user_error(self) -> str | None:
        """The latest reproduction failed without torch.compile too (and no waiver says otherwise)."""
        record = self.latest(Step.reproduce)
        if record is None or record.ok or self.waiver(Step.reproduce):
            return None
        found = record.payload(ReproduceEvidence)
        if found.category != USER_ERROR:
            return None
        if found.own_backend:
            return stopped_own_backend(found.script, found.own_backend, self.case.case_id)
        return stopped_user_error(found.script, self.case.case_id)

    def stopped(self) -> str | None:
        user_error = self.user_error()
        if user_error is not None:
            return user_error
        spec = SPEC[Step.main_check]
        record = self.latest(Step.main_check)
        if record is None or record.ok or self._rebased(spec, record) or self.waiver(Step.main_check):
            return None
        ref = record.payload(MainCheckEvidence).ref
        return stopped_main(ref, self.case.case_id)

    def current_script(self) -> str | None:
        """The case's current repro: the script the agent ran last to a step's evidence (the reproduction's, or
        a reduced repro a later logged run ran)."""
        scripts = {Step.reproduce.value: lambda r: r.payload(ReproduceEvidence).script,
                   Step.logs.value: lambda r: r.payload(LogsEvidence).script}
        return next((found for record in reversed(self._evidence) if record.ok and record.step in scripts
                     and (found := scripts[record.step](record))), None)

    def category(self) -> str | None:
        """The case's category: the classification's, else the reproduction's."""
        classified = self.latest_ok(Step.classify)
        if classified is not None and (found := classified.payload(ClassifyEvidence).category):
            return found
        reproduced = self.latest_ok(Step.reproduce)
        return reproduced.payload(ReproduceEvidence).category if reproduced is not None else None

    def _filled(self, arguments: dict[str, object]) -> dict[str, object]:
        """The arguments' slots filled from what the case holds: the repro, its preset, the run to classify."""
        good = self.latest_ok(Step.reproduce)
        if good is None:
            return arguments
        out = dict(arguments)
        repro = good.payload(ReproduceEvidence)
        script = self.current_script()
        if script and out.get("script") == REPRO:
            out["script"] = script
        if out.get("logs") == PRESET:
            from pt2_bug_basher.playbooks import layer_of, log_preset

            # reproduced already (the repeats and the compile-off run are on record): one logged run is enough
            out["logs"], out["repeat"] = log_preset(repro.category, layer_of(self.localization)), 1
        logs = self.latest_ok(Step.logs)
        run_id = (logs.run_id if logs is not None else None) or good.run_id
        if run_id and out.get("run_id") == RUN_ID:
            out["run_id"] = run_id
        return out

    def step_status(self, spec: StepSpec) -> StepStatus:
        call = spec.opening(self.case.case_id) if spec.tool is None else format_call(
            spec.tool, **self._filled(spec.call_arguments(self.case.case_id)))
        if spec.step == Step.reduce and self.localization is None:
            # Step 3 starts with the backend ladder: it says which layer fails, and which minifier fits.
            call = format_call(ToolName.localize, **self._filled({"case_id": self.case.case_id, "script": REPRO}))
        if spec.step == Step.environment:
            # the case's own interpreter and repository, as check_env would be called again for them
            call = format_call(ToolName.check_env, python=self.case.python, repo=self.case.repo)
        if spec.step == Step.test and (registered := self.latest_ok(Step.test)) is not None:
            # the test the case registered, as the call that registered it
            test = registered.payload(TestEvidence)
            if test.test_file and test.test_name:
                call = format_call(ToolName.register_test, case_id=self.case.case_id, test_file=test.test_file,
                                   test_name=test.test_name)
        status = StepStatus(number=spec.number, step=spec.step, title=spec.title, status="pending", tool_call=call)
        if not spec.observed:
            status.status = "agent"
            return status
        latest = self.latest(spec.step)
        good = self.latest_ok(spec.step)
        if good is not None and self._rebased(spec, good):
            good = None
        if good is not None and spec.current_tree and latest is not None and latest.id > good.id \
                and latest.tree_hash == self.tree_hash and not self._rebased(spec, latest):
            good = None  # a later failure on this same code revokes the earlier pass (a flaky test)
        if good is not None:
            status.evidence, status.run_id = good.summary, good.run_id
            ran = getattr(good.data, "script", None)
            if ran and spec.tool is not None and ("script", REPRO) in spec.arguments:
                # the call as it completed the step: on the script it ran (a minified copy, say)
                status.tool_call = format_call(
                    spec.tool, **{**self._filled(spec.call_arguments(self.case.case_id)), "script": ran})
            if spec.current_tree and good.tree_hash != self.tree_hash:
                status.status = "stale"
                status.evidence = f"{good.summary} (on an earlier state of the code; the tree changed since)"
            elif spec.step == Step.main_check and self._test_changed_since(good):
                status.status = "stale"
                changed = good.payload(MainCheckEvidence).test_file
                status.evidence = (f"{good.summary} (the registered test's file, {changed}, has changed since the "
                                   "check ran it there: check it on the ref again)")
            else:
                status.status = "done"
        elif latest is not None and not self._rebased(spec, latest):
            status.evidence, status.run_id = latest.summary, latest.run_id
            stops = spec.step == Step.main_check or (spec.step == Step.reproduce and self.user_error() is not None)
            status.status = "stopped" if stops else "failed"
        if status.status == "failed" and spec.step in _WAY_FORWARD:
            status.tool_call = _WAY_FORWARD[spec.step](self)  # the same call would fail the same way
        if status.status != "done" and self.waiver(spec.step) is not None:
            status.status = "waived"
            status.evidence = f"waived: {self.waiver(spec.step).reason}"  # type: ignore[union-attr]
        return status

    def is_complete(self, step: Step) -> bool:
        return self.step_status(SPEC[step]).status in CLOSED

    def require(self, tool: ToolName) -> None:
        """Raise GateClosed naming the first missing step and the exact call that opens it."""
        for step in TOOL_REQUIRES.get(tool, ()):
            status = self.step_status(SPEC[step])
            if status.status in CLOSED:
                continue
            if status.status == "stopped":
                raise GateClosed(f"{tool.value} refused: the case is stopped — " + (self.stopped() or ""))
            why = {
                "stale": "its evidence was taken on an earlier state of the code and the tree has changed since",
                "failed": f"its last attempt did not succeed ({status.evidence})",
                "pending": "it has not been done",
            }.get(status.status, status.status)
            hint = ("; or, with a reason, " + format_call(ToolName.waive_step, case_id=self.case.case_id,
                                                          step=step.value, reason="<why it does not apply>")
                    ) if SPEC[step].waivable else ""
            raise GateClosed(
                f"{tool.value} refused: step {SPEC[step].number} '{SPEC[step].title}' is not complete — {why}. "
                f"Next call: {status.tool_call}{hint}"
            )

    def status(self) -> CaseStatus:
        steps = [self.step_status(spec) for spec in STEPS]
        stopped = self.stopped()
        return CaseStatus(
            case_id=self.case.case_id,
            repo=self.case.repo,
            python=self.case.python,
            steps=steps,
            waivers=[Waiver(step=Step(w.step), reason=w.reason) for w in self._waivers],
            stopped=stopped,
            next_open=None if stopped else self._next_open(steps),
            next_step=stopped or self._next(steps),
        )

    @staticmethod
    def _next_open(steps: list[StepStatus]) -> Step | None:
        """The first step not closed and not the agent's own (steps 9 and 10)."""
        return next((s.step for s in steps if s.status not in CLOSED and s.status != "agent"), None)

    def _next(self, steps: list[StepStatus]) -> str:
        open_step = self._next_open(steps)  # steps 9 and 10 are the agent's: verification is the next observable
        for status in steps:
            if status.step != open_step:
                continue
            if status.step == Step.verify and status.status == "pending":
                named = {Step.logs: "the logs", Step.artifacts: "the debug artifacts"}
                sources = [named[s.step] for s in steps if s.step in named and s.status == "done"]
                found_from = " and ".join(sources) or "localize's suspects and the reproduction's traceback"
                return f"Find the root cause from {found_from}, fix it in the repository, then: " + status.tool_call
            text = f"Step {status.number} ({status.title}): {status.tool_call}"
            if status.step == Step.artifacts:
                text = self._artifacts_next(status, text)
            return text
        return "All steps are complete. Well done."

    def _artifacts_next(self, status: StepStatus, text: str) -> str:
        """Step 8 where localize's layer says the artifacts cannot show the bug: the waiver first (a wrong result
        outside the graph), or beside the call (backend='eager': Dynamo's logs, no kernels)."""
        from pt2_bug_basher.playbooks import blind_spot

        loc = self.localization
        if loc is None:
            return text
        cid = self.case.case_id
        if blind_spot(self.category(), loc.layer) is not None:
            waive_call = format_call(ToolName.waive_step, case_id=cid, step=Step.artifacts.value, reason=(
                f"{self.category()} in {loc.layer}: the compiled graph's outputs match eager, so no artifact shows "
                "the fault; read the runtime wrappers instead"))
            return (f"Step {status.number} ({status.title}) cannot show a wrong result that lies outside the "
                    f"compiled graph, as localize found it ({loc.layer}): {waive_call}; or collect them anyway: "
                    f"{status.tool_call}")
        if loc.first_failing == "eager":
            named = "localize's suspects name the Dynamo source" if loc.suspects else "the bug is in Dynamo's tracing"
            waive_call = format_call(ToolName.waive_step, case_id=cid, step=Step.artifacts.value, reason=(
                f"fails with backend='eager': no graph reaches Inductor, and {named}"))
            shown = "the traceback and localize's suspects show" if loc.suspects else "Dynamo's logs show"
            return (text + " - localize found backend='eager' failing, so no graph reaches Inductor: this collects "
                    f"Dynamo's own logs and guards, not kernels. If {shown} the cause already: {waive_call}")
        return text


def _past_classification(flow: Workflow) -> str:
    """Classifying the same run's text again reads it the same way: localize's backend ladder says which layer
    fails when it has not run; after it, the classification is waived on what the case has."""
    cid = flow.case.case_id
    if flow.localization is None:
        return format_call(ToolName.localize, **flow._filled({"case_id": cid, "script": REPRO}))
    layer = flow.localization.layer or "no layer"
    return format_call(ToolName.waive_step, case_id=cid, step=Step.classify.value,
                       reason=f"no rule places the run's text and the reproduction settled no category; localize "
                              f"found {layer} (first failing backend: {flow.localization.first_failing})")


# A failed step whose own call is deterministic (the same input reads the same way): the way forward instead.
_WAY_FORWARD: dict[Step, Callable[[Workflow], str]] = {
    Step.classify: _past_classification,
}


def waive(store: Store, case_id: str, step: str, reason: str) -> WaiverRecord:
    try:
        parsed = Step(step)
    except ValueError as exc:
        names = ", ".join(s.value for s in Step)
        raise InvalidInput(f"unknown step {step!r}; steps are: {names}") from exc
    spec = SPEC[parsed]
    if not spec.waivable:
        raise InvalidInput(f"step {parsed.value!r} cannot be waived: the server must observe it itself.")
    if not spec.observed:
        raise InvalidInput(f"step {parsed.value!r} is the agent's own work and has no gate to waive.")
    reason = reason.strip()
    if len(reason) < 10:
        raise InvalidInput("a waiver needs a reason of at least 10 characters saying why the step does not apply.")
    if len(reason) > 2000:
        raise InvalidInput("keep the waiver reason under 2000 characters.")
    store.get_case(case_id)
    return store.add_waiver(case_id, parsed.value, reason)
