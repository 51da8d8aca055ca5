"""The one same-failure judgement, in each caller's rules: reruns of the repro, a new test against the
reproduction, the registered test on another ref."""

from __future__ import annotations

from pt2_bug_basher.analysis.compare import (
    RERUN,
    RERUN_OR_ACCURACY,
    Failure,
    Raiser,
    new_test,
    on_other_ref,
    same_failure,
)

REPRO = Failure(signature="InternalTorchDynamoError: KeyError: 'reverse' @ repro.py:fn#1a2b3c4d",
                category="dynamo_internal", exception_type="torch._dynamo.exc.InternalTorchDynamoError",
                message="KeyError: 'reverse'\n\nfrom user code: ...")


def test_reruns_match_by_signature_then_by_exception_and_normalised_message():
    assert same_failure(REPRO, REPRO, RERUN).level == "signature"
    other_frames = REPRO.model_copy(update={"signature": "InternalTorchDynamoError: KeyError @ min.py:f#99"})
    assert same_failure(other_frames, REPRO, RERUN).level == "exception"
    other_message = other_frames.model_copy(update={"message": "KeyError: 'key'"})
    assert same_failure(other_message, REPRO, RERUN).level is None
    assert same_failure(REPRO.model_copy(update={"failed": False}), REPRO, RERUN).reason.endswith("passes")
    assert same_failure(REPRO.model_copy(update={"timed_out": True}), REPRO, RERUN).level is None
    # Backend names in the message do not count: the ladder swaps backends.
    inductor = Failure(exception_type="BackendCompilerFailed", message="backend='inductor' raised: boom", signature="a")
    eager = inductor.model_copy(update={"message": "backend='eager' raised: boom", "signature": "b"})
    assert same_failure(eager, inductor, RERUN).level == "exception"


def test_reruns_of_soft_and_accuracy_failures():
    soft = Failure(signature="graph_breaks|Unsupported call@x.py:3", category="graph_break")
    breaks = Failure(signature="graph_breaks|other", category="graph_break", graph_break_reasons=["Unsupported call"])
    assert same_failure(breaks, soft, RERUN).level == "exception"
    assert same_failure(breaks.model_copy(update={"graph_break_reasons": []}), soft, RERUN).level is None
    script = Failure(category="accuracy", exception_type="AssertionError", message="Tensor-likes are not close",
                     signature="s")
    repro = Failure(category="accuracy", exception_type="AccuracyError", message="Bad accuracy", signature="r")
    assert same_failure(repro, script, RERUN).level is None
    assert same_failure(repro, script, RERUN_OR_ACCURACY).level == "category"


def test_the_scripts_own_assertion_matches_when_only_the_values_it_prints_differ():
    # a variant without one statement of the repro: the same check fails, showing other dict contents
    mine = Raiser(file="/work/train_step.py", in_torch=False, generated=False)
    wanted = Failure(category="accuracy", exception_type="AssertionError", signature="a", raised_by=mine,
                     message="state after the compiled step: {'scale': 2.0, 'calls': 1}")
    seen = wanted.model_copy(update={"message": "state after the compiled step: {'scale': 2.0}", "signature": "b",
                                     "category": "unknown"})
    assert same_failure(seen, wanted, RERUN).level == "assertion"
    other_check = seen.model_copy(update={"message": "calls after the compiled step: {'calls': 2}"})
    assert same_failure(other_check, wanted, RERUN).level is None
    in_torch = seen.model_copy(update={"raised_by": Raiser(file="/x/torch/_dynamo/utils.py", in_torch=True,
                                                            generated=False)})
    assert same_failure(in_torch, wanted, RERUN).level is None


def test_a_new_test_against_the_reproduction():
    rules = new_test("test/dynamo/test_repros.py")
    same_type = REPRO.model_copy(update={"signature": "from the test#1", "message": "KeyError: 'reverse'"})
    assert same_failure(same_type, REPRO, rules).level == "exception"
    # The same type in another category is a different failure; a secondary category is related.
    elsewhere = same_type.model_copy(update={"category": "runtime_crash"})
    assert not same_failure(elsewhere, REPRO, rules).matches
    assert same_failure(elsewhere.model_copy(update={"secondary": ["dynamo_internal"]}), REPRO, rules).matches
    typo = Failure(exception_type="NameError", message="name 'doubel' is not defined", category="unknown")
    match = same_failure(typo, REPRO, rules)
    assert not match.matches and "mistake in the test" in match.reason and "InternalTorchDynamoError" in match.reason
    # A graph break shows in a test as its own assertion, raised in the test file.
    soft = Failure(signature="graph_breaks|x", category="graph_break")
    asserting = Failure(exception_type="AssertionError", category="unknown",
                        frame="/repo/test/dynamo/test_repros.py:12 in test_x")
    assert same_failure(asserting, soft, rules).level == "assertion"
    assert not same_failure(asserting.model_copy(update={"frame": "/repo/torch/x.py:1 in f"}), soft, rules).matches
    # A waived reproduction (nothing recorded): any real exception of the test.
    assert same_failure(same_type, Failure.recorded(None), rules).matches


def test_the_registered_test_on_another_ref():
    rules = on_other_ref("main")
    on_tree = Failure(exception_type="ValueError", category="unknown", message="double() cannot take 21")
    assert same_failure(on_tree.model_copy(update={"message": "other"}), on_tree, rules).level == "exception"
    missing = Failure(exception_type="ImportError", message="cannot import name 'triple'", category="unknown")
    match = same_failure(missing, on_tree, rules)
    assert not match.matches and "on main the test" in match.reason
    categorised = Failure(exception_type="KeyError", category="dynamo_internal")
    assert same_failure(Failure(exception_type="RuntimeError", category="dynamo_internal"), categorised,
                        rules).level == "category"
    assert not same_failure(Failure(exception_type="RuntimeError", category="unknown"),
                            categorised.model_copy(update={"category": "unknown"}), rules).matches
