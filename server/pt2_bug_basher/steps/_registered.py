"""The case's registered test, for the steps after register_test."""

from __future__ import annotations

from pt2_bug_basher.case.workflow import Workflow
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import GateClosed
from pt2_bug_basher.domain.evidence import TestEvidence
from pt2_bug_basher.domain.names import Step, ToolName


def registered_test(flow: Workflow) -> TestEvidence:
    """The case's registered test (the latest passing `test` evidence)."""
    record = flow.latest_ok(Step.test)
    if record is None:
        case_id = flow.case.case_id
        raise GateClosed(
            "the case has no registered test (the test step was waived, so there is nothing to run). "
            "Register one: " + format_call(ToolName.register_test, case_id=case_id,
                                           test_file="test/<area>/test_<topic>.py", test_name="<TestClass.test_name>")
        )
    return record.payload(TestEvidence)


def qualified_name(test: TestEvidence) -> str:
    """`Class.test` of the registered test: what the report plugin selects generated variants by."""
    method = test.method or test.test_name.split(".")[-1]
    return f"{test.class_name}.{method}" if test.class_name else test.test_name
