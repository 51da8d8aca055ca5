"""The calls the workflow names are filled from the case: the repro, its category's preset, the run to classify."""

from __future__ import annotations

import sys
from pathlib import Path

from pt2_bug_basher.case.store import Store
from pt2_bug_basher.case.workflow import SPEC, Workflow
from pt2_bug_basher.domain.evidence import LogsEvidence, ReproduceEvidence
from pt2_bug_basher.domain.names import Step


def test_template_slots_are_filled_from_the_case(tmp_path: Path):
    store = Store(tmp_path / "state")
    case = store.create_case(str(tmp_path), sys.executable, {})

    def call(step: Step) -> str:
        return Workflow(store, case.case_id, lambda: "tree").step_status(SPEC[step]).tool_call

    assert 'script="<repro.py>"' in call(Step.logs) and 'logs="<preset>"' in call(Step.logs)
    assert 'run_id="<run_id>"' in call(Step.classify)
    store.add_evidence(case.case_id, Step.reproduce, True, "failed 2/2", run_id="run-repro",
                       data=ReproduceEvidence(script="/r/repro.py", category="accuracy", run_ids=["run-repro"]))
    # reproduced already: one logged run is the logs step
    assert call(Step.logs) == (f'run_with_logs(case_id="{case.case_id}", script="/r/repro.py", logs="accuracy", '
                               'repeat=1)')
    assert call(Step.classify) == f'classify_error(case_id="{case.case_id}", run_id="run-repro")'
    store.add_evidence(case.case_id, Step.logs, True, "logs", run_id="run-logs", data=LogsEvidence(logs="x"))
    assert call(Step.classify).endswith('run_id="run-logs")')
    # A category without a preset (not a compiler failure) names the general one, which run_with_logs takes.
    store.add_evidence(case.case_id, Step.reproduce, True, "failed 2/2", run_id="run-2",
                       data=ReproduceEvidence(script="/r/repro.py", category="user_error"))
    assert call(Step.logs).endswith('logs="unknown", repeat=1)')


def test_step_three_starts_with_localize_then_minify(tmp_path: Path):
    from pt2_bug_basher.domain.evidence import LocalizeRecord

    store = Store(tmp_path / "state")
    case = store.create_case(str(tmp_path), sys.executable, {})
    store.add_evidence(case.case_id, Step.reproduce, True, "failed 2/2", run_id="run-1",
                       data=ReproduceEvidence(script="/r/repro.py", category="accuracy"))

    def reduce_call() -> str:
        return Workflow(store, case.case_id, lambda: "tree").step_status(SPEC[Step.reduce]).tool_call

    assert reduce_call() == f'localize(case_id="{case.case_id}", script="/r/repro.py")'
    store.set_localization(case.case_id, LocalizeRecord(first_failing="inductor", layer="Inductor"))
    assert reduce_call().startswith(f'minify(case_id="{case.case_id}", script="/r/repro.py"')


def test_the_environment_step_shows_how_the_case_was_opened(tmp_path: Path):
    store = Store(tmp_path / "state")
    case = store.create_case(str(tmp_path), sys.executable, {})
    call = Workflow(store, case.case_id, lambda: "tree").step_status(SPEC[Step.environment]).tool_call
    assert call == f'check_env(python="{sys.executable}", repo="{tmp_path}")'


def test_a_registered_test_step_shows_the_call_that_registered_it(tmp_path: Path):
    from pt2_bug_basher.domain.evidence import TestEvidence

    store = Store(tmp_path / "state")
    case = store.create_case(str(tmp_path), sys.executable, {})

    def call() -> str:
        return Workflow(store, case.case_id, lambda: "tree").step_status(SPEC[Step.test]).tool_call

    assert 'test_file="test/<area>/test_<topic>.py"' in call()  # nothing registered yet: the template
    store.add_evidence(case.case_id, Step.test, True, "fails as the repro does", run_id="run-t",
                       data=TestEvidence(test_file="test/test_decomp.py", test_name="DecompTests.test_hardsigmoid"))
    assert call() == (f'register_test(case_id="{case.case_id}", test_file="test/test_decomp.py", '
                      'test_name="DecompTests.test_hardsigmoid")')
