"""Tests for pt2_bug_basher.analysis.classify: pure text, no torch import, no subprocess.

The corpus (tests/data/corpus) holds real failure output: public issue excerpts and failures
produced locally by the scripts in tests/data/corpus/scripts*. Speed is measured in
bench/bench_classify.py, not here.
"""

from __future__ import annotations

import pytest
from corpus_samples import BY_ID, HELDOUT, LOCAL, LOCAL_GPU, PUBLIC, TRAINING, TUNING
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pt2_bug_basher.analysis import fallback
from pt2_bug_basher.analysis.classify import (
    CATEGORIES,
    FRAME_KINDS,
    MESSAGE_RULES,
    REFINEMENTS,
    Classification,
    _fallback_frame_kind,
    _frame_kind,
    _frame_kind_row,
    classify,
    guessed,
)
from pt2_bug_basher.analysis.failure import Frame, parse, strip_prefix

SEVEN = {"graph_break", "backend_compiler_failed", "recompile", "accuracy", "dynamo_internal",
         "runtime_crash", "triton"}


def _classify(d: dict) -> Classification:
    return classify(d["text"], d.get("exit_code"), d.get("signal_name"))


def is_right(d: dict, category: str) -> bool:
    """The corpus rule: `label` or one of `also`; on `other`, any category outside the seven."""
    accepted = {d["label"], *d.get("also", [])}
    return category in accepted or ("other" in accepted and category not in SEVEN)


def assert_valid(c: Classification, text: str) -> None:
    assert c.category in CATEGORIES
    assert all(s in CATEGORIES and s != c.category for s in c.secondary)
    assert 0.0 <= c.confidence <= 1.0
    assert len(c.evidence) <= 8
    lines = text.split("\n")  # line numbers count "\n"-separated lines, as grep -n does
    for e in c.evidence:
        assert len(e.text) <= 300
        assert 1 <= e.line_no <= max(1, len(lines)), e
        # verbatim: the evidence is the line (or its first 300 characters)
        assert lines[e.line_no - 1].startswith(e.text) or e.text in lines[e.line_no - 1], e


def evidence_has(c: Classification, text: str, needle: str) -> None:
    lines = text.split("\n")
    hits = [e for e in c.evidence if needle in e.text]
    assert hits, f"no evidence line contains {needle!r}: {[e.text for e in c.evidence]}"
    for e in hits:
        assert needle in lines[e.line_no - 1]


# --------------------------------------------------------------------------------------------
# Local samples: exact category, decisive line as evidence with its line number

DECISIVE = {
    "local-gb_fullgraph_print": "torch._dynamo.exc.Unsupported: Failed to trace builtin operator",
    "local-gb_fullgraph_data_dependent": "torch._dynamo.exc.Unsupported: Data-dependent branching",
    "local-gb_inject_build_set": "torch._dynamo.exc.Unsupported: missing BUILD_SET handler",
    "local-gb_logs_only": "[__graph_breaks] Graph",
    "local-gb_pytest_fullgraph": "E   torch._dynamo.exc.Unsupported: Tensor.tolist()",
    "local-bcf_inductor_cpp_compile_error": "torch._inductor.exc.InductorError: CppCompileError: C++ compile error",
    "local-bcf_backend_raises": "BackendCompilerFailed: backend='relu_compile_error_TESTING_ONLY' raised:",
    "local-bcf_lowering_exception": "torch._inductor.exc.InductorError: LoweringException: NotImplementedError",
    "local-rc_recompile_limit": "torch._dynamo.exc.FailOnRecompileLimitHit: Hard failure",
    "local-rc_error_on_recompile": "torch._dynamo.exc.RecompileError: Recompiling function forward",
    "local-rc_recompile_limit_warning": "torch._dynamo hit config.recompile_limit (2)",
    "local-acc_repro_level4": "torch._dynamo.debug_utils.AccuracyError: Bad accuracy detected",
    "local-acc_inductor_accuracy_assert_close": "AssertionError: Tensor-likes are not close!",
    "local-acc_allclose_report": "torch.allclose(eager, compiled, atol=1e-5): False",
    "local-di_internal_keyerror": "torch._dynamo.exc.InternalTorchDynamoError: KeyError: missing_handler_key",
    "local-rt_compiled_index_error": "RuntimeError: kernel, ",
    "local-rt_inductor_cpp_runtime_error": "RuntimeError: unhandled error",
    "local-rt_backend_runtime_assert": "AssertionError: ReluRuntimeError",
    "local-rt_segfault_faulthandler": "Fatal Python error: Segmentation fault",
    "local-exp_constraint_violation": "torch._dynamo.exc.UserError: Constraints violated (batch)!",
    "local-exp_nonstrict_data_dependent": "GuardOnDataDependentSymNode: Could not guard on data-dependent",
    "local-exp_strict_data_dependent": "torch._dynamo.exc.Unsupported: Data-dependent branching",
    "gpu-tr_user_kernel_compile_error": "torch._inductor.exc.InductorError: CompilationError: at 3:25:",
    "gpu-tr_user_kernel_eager_compile_error": "triton.compiler.errors.CompilationError: at 5:33:",
    "gpu-tr_out_of_resources": "triton.runtime.errors.OutOfResources: out of resource: shared memory",
    "gpu-rt_cuda_index_out_of_bounds": "CUDA error: device-side assert triggered",
    "gpu-acc_triton_repro_level4": "AccuracyError: Bad accuracy detected",
}


@pytest.mark.parametrize("sample", LOCAL + LOCAL_GPU, ids=lambda d: d["id"])
def test_local_sample_exact_category(sample: dict) -> None:
    c = _classify(sample)
    assert c.category == sample["label"], (c.category, c.secondary, [e.text for e in c.evidence])
    assert_valid(c, sample["text"])
    if sample["id"] in DECISIVE:
        evidence_has(c, sample["text"], DECISIVE[sample["id"]])
    if sample.get("signal_name") or sample.get("exit_code"):
        assert c.failure is not None


def test_decisive_line_number_is_exact() -> None:
    d = BY_ID["local-gb_fullgraph_print"]
    c = _classify(d)
    lines = d["text"].splitlines()
    want = next(i for i, ln in enumerate(lines, 1) if ln.startswith("torch._dynamo.exc.Unsupported:"))
    assert c.evidence[0].line_no == want
    assert c.evidence[0].text == lines[want - 1]
    assert c.evidence[0].rule.startswith("exception:")


def test_silent_segfault_uses_the_signal() -> None:
    d = BY_ID["local-rt_segfault_silent"]
    assert d["signal_name"] == "SIGSEGV" and "Fatal" not in d["text"]
    c = _classify(d)
    assert c.category == "runtime_crash" and c.phase == "runtime"
    assert c.failure is not None and c.failure.signal_name == "SIGSEGV"
    assert classify(d["text"], text_model=None).category == "unknown"  # without the signal no rule sees anything
    assert classify(d["text"], exit_code=139).category == "runtime_crash"  # shell-style 128+11
    assert classify(d["text"], exit_code=-11).category == "runtime_crash"


# --------------------------------------------------------------------------------------------
# Compile mode and phase


@pytest.mark.parametrize(("sid", "mode", "phase"), [
    ("local-exp_strict_data_dependent", "strict_export", "trace"),
    ("local-exp_nonstrict_data_dependent", "non_strict_export", "trace"),
    ("local-exp_constraint_violation", "non_strict_export", "trace"),
    ("local-gb_fullgraph_print", "torch.compile", "trace"),
    ("local-bcf_inductor_cpp_compile_error", "torch.compile", "backend_compile"),
    ("local-rt_compiled_index_error", "torch.compile", "runtime"),
    ("local-acc_repro_level4", "torch.compile", "runtime"),
])
def test_compile_mode_and_phase(sid: str, mode: str, phase: str) -> None:
    c = _classify(BY_ID[sid])
    assert c.compile_mode == mode
    assert c.phase == phase


def test_graph_break_inside_strict_export_is_export_with_graph_break_secondary() -> None:
    c = _classify(BY_ID["local-exp_strict_data_dependent"])
    assert c.category == "export"
    assert "graph_break" in c.secondary


# --------------------------------------------------------------------------------------------
# Triton wrapped in a backend failure


def test_triton_error_in_inductor_error_is_triton_with_backend_secondary() -> None:
    c = _classify(BY_ID["gpu-tr_user_kernel_compile_error"])
    assert c.category == "triton"
    assert "backend_compiler_failed" in c.secondary
    assert c.phase == "backend_compile"


def test_triton_error_in_backend_compiler_failed_is_triton_with_backend_secondary() -> None:
    # the same failure as printed before torch 2.7 (BackendCompilerFailed instead of InductorError)
    text = BY_ID["gpu-tr_user_kernel_compile_error"]["text"].replace(
        "torch._inductor.exc.InductorError: CompilationError: at 3:25:",
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nCompilationError: at 3:25:")
    c = classify(text, 1)
    assert c.category == "triton"
    assert "backend_compiler_failed" in c.secondary
    evidence_has(c, text, "BackendCompilerFailed: backend='inductor' raised:")
    assert c.failure is not None
    assert c.failure.chained[:2] == ["torch._dynamo.exc.BackendCompilerFailed", "CompilationError"]


def test_cpp_compile_error_is_not_triton() -> None:
    c = _classify(BY_ID["local-bcf_inductor_cpp_compile_error"])
    assert c.category == "backend_compiler_failed"
    assert "triton" not in c.secondary


# --------------------------------------------------------------------------------------------
# Noisy, truncated and chained output

WARNING = ("/opt/venv/lib/python3.11/site-packages/torch/_inductor/lowering.py:1917: UserWarning: "
           "Torchinductor does not support code generation for complex operators. Performance may be "
           "worse than eager.\n  warnings.warn(\n")


@pytest.mark.parametrize("sid", ["local-gb_fullgraph_print", "local-bcf_inductor_cpp_compile_error",
                                 "local-rc_recompile_limit", "local-acc_allclose_report",
                                 "local-rt_segfault_faulthandler"])
def test_5000_warning_lines_before_the_error(sid: str) -> None:
    d = BY_ID[sid]
    noise = WARNING * 2500  # 5000 lines
    text = noise + d["text"]
    c = classify(text, d.get("exit_code"), d.get("signal_name"))
    assert c.category == d["label"]
    assert_valid(c, text)
    plain = classify(d["text"], d.get("exit_code"), d.get("signal_name"))
    # the same decisive lines, shifted by the 5000 noise lines
    assert [(e.line_no - 5000, e.text) for e in c.evidence][:3] == [(e.line_no, e.text) for e in plain.evidence][:3]


def test_last_line_is_the_dynamo_hint_not_the_error() -> None:
    d = BY_ID["local-bcf_backend_raises"]
    assert d["text"].strip().splitlines()[-1].startswith("Set TORCHDYNAMO_VERBOSE=1")
    c = _classify(d)
    assert c.category == "backend_compiler_failed"
    assert c.failure is not None and c.failure.exception_type == "torch._dynamo.exc.BackendCompilerFailed"


def test_traceback_cut_before_the_exception_line() -> None:
    lines = BY_ID["local-bcf_backend_raises"]["text"].splitlines()
    cut = "\n".join(lines[:lines.index(next(ln for ln in lines if ln.startswith("torch._dynamo.exc.")))])
    c = classify(cut)
    assert c.category == "backend_compiler_failed"
    evidence_has(c, cut, "raise BackendCompilerFailed(")


def test_traceback_cut_at_the_start() -> None:
    text = "\n".join(BY_ID["local-di_internal_keyerror"]["text"].splitlines()[20:])
    assert "Traceback (most recent call last)" not in text
    c = classify(text)
    assert c.category == "dynamo_internal"
    assert c.failure is not None and c.failure.exception_type == "torch._dynamo.exc.InternalTorchDynamoError"


def test_chained_exception_final_one_decides() -> None:
    d = BY_ID["local-rc_recompile_limit"]
    assert "The above exception was the direct cause of the following exception" in d["text"]
    c = _classify(d)
    assert c.category == "recompile"
    assert c.failure is not None
    assert c.failure.chained == ["torch._dynamo.exc.FailOnRecompileLimitHit", "torch._dynamo.exc.Unsupported"]


def test_during_handling_chain() -> None:
    d = BY_ID["local-exp_constraint_violation"]
    assert "During handling of the above exception" in d["text"]
    c = _classify(d)
    assert c.category == "export"
    assert c.failure is not None and c.failure.exception_type == "torch._dynamo.exc.UserError"


def test_suppressed_error_logged_then_script_succeeds() -> None:
    # suppress_errors=True style: the traceback is logged at WARNING level and the run exits 0
    inner = BY_ID["local-bcf_backend_raises"]["text"].strip().splitlines()
    logged = "\n".join(f"W1202 18:47:30.000000 4242 torch/_dynamo/convert_frame.py:1290] {ln}" for ln in inner)
    c = classify(logged + "\ntraining step 1 loss 0.5\ndone\n", exit_code=0)
    assert c.category == "backend_compiler_failed"


def test_graph_break_log_far_before_a_long_tail() -> None:
    d = BY_ID["local-gb_logs_only"]
    text = d["text"] + "step 1 ok\n" * 60000  # ~600 KB of later output
    c = classify(text, 0)
    assert c.category == "graph_break"
    evidence_has(c, text, "[__graph_breaks]")


def test_empty_and_clean_output() -> None:
    assert classify("").category == "unknown"
    c = classify("epoch 1: loss 0.3\nepoch 2: loss 0.2\ndone\n", exit_code=0)
    assert c.category == "unknown" and c.failure is None and c.evidence == []


# --------------------------------------------------------------------------------------------
# Corpus accuracy (public: development set, so the threshold leaves room; local: all right)


def _pred_class(category: str) -> str:
    return category if category in SEVEN else "other"


def _report(name: str, samples: list[dict]) -> float:
    """Print overall accuracy and per-label precision/recall; return the accuracy.

    recall(L) = right answers among samples labelled L; precision(L) = right answers among
    samples whose prediction falls in L (export and unknown fall in `other`)."""
    preds = [(d, _classify(d).category) for d in samples]
    right = sum(is_right(d, got) for d, got in preds)
    print(f"\n{name}: {right}/{len(samples)} = {right / len(samples):.3f}")
    for label in sorted({d["label"] for d in samples}):
        labelled = [(d, got) for d, got in preds if d["label"] == label]
        predicted = [(d, got) for d, got in preds if _pred_class(got) == _pred_class(label)]
        recall = sum(is_right(d, got) for d, got in labelled) / len(labelled)
        precision = (sum(is_right(d, got) for d, got in predicted) / len(predicted)) if predicted else float("nan")
        print(f"  {label:<24} n={len(labelled):<3} precision={precision:.2f} recall={recall:.2f}")
    return right / len(samples)


def test_public_corpus_accuracy() -> None:
    assert _report("public", PUBLIC) >= 0.9


def test_local_corpus_accuracy() -> None:
    assert _report("local", LOCAL) == 1.0
    assert _report("local_gpu", LOCAL_GPU) == 1.0


# --------------------------------------------------------------------------------------------
# Robustness: never raises, always a valid model

FRAGMENTS = [
    "Traceback (most recent call last):\n", '  File "/x/torch/_dynamo/eval_frame.py", line 1, in _fn\n',
    '  File "repro.py", line 3, in forward\n', "    return f(x)\n", "           ^^^^\n",
    "torch._dynamo.exc.Unsupported: call_function\n", "from user code:\n", "\n",
    "The above exception was the direct cause of the following exception:\n",
    "During handling of the above exception, another exception occurred:\n",
    "Fatal Python error: Segmentation fault\n", "Current thread 0x00007f (most recent call first):\n",
    '  File "a.py", line 2 in g\n', "V1202 18:46:49.242000 6711 torch/_dynamo/symbolic_convert.py:5124] [0/0] ",
    "[__graph_breaks] Graph break in user code at a.py:3\n", "E   ", "[rank0]: ", "InductorError: X\n",
    "---------------------------------------------------------------------------\n",
    "IndexError                                Traceback (most recent call last)\n",
    "File /x/torch/_inductor/graph.py:12, in run(self)\n", "---> 12 code\n", "CUDA error: illegal\n",
    "torch._dynamo hit config.recompile_limit (8)\n", "Tensor-likes are not close!\n", "\x00", "\r\n",
    "x" * 5000, "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace\n", "triton.compiler.errors.\n",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=3000), st.one_of(st.none(), st.integers(-20, 300)),
       st.one_of(st.none(), st.sampled_from(["SIGSEGV", "SIGABRT", "SIGKILL", "weird"])))
def test_never_raises_on_arbitrary_text(text: str, exit_code: int | None, signal_name: str | None) -> None:
    c = classify(text, exit_code, signal_name)
    assert_valid(c, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=60), st.one_of(st.none(), st.integers(-11, 139)))
def test_never_raises_on_traceback_like_text(parts: list[str], exit_code: int | None) -> None:
    text = "".join(parts)
    c = classify(text, exit_code)
    assert_valid(c, text)


def test_huge_single_line_and_nul_bytes() -> None:
    text = "\x00" * 1000 + "a" * 2_000_000 + "torch._dynamo.exc.Unsupported: x" + "\x00b" * 1000
    c = classify(text, 1)
    assert c.category == "graph_break"
    assert_valid(c, text)
    c = classify("\x00\x00\n\x00", 1)
    assert_valid(c, "\x00\x00\n\x00")


def test_a_graph_compiled_at_its_return_is_no_graph_break() -> None:
    compiled = ("V1206 06:39:41.162000 7414 torch/_dynamo/output_graph.py:1970] [0/0] COMPILING GRAPH due to "
                "GraphCompileReason(reason='return_value', user_stack=[<FrameSummary file /w/step.py, line 7 in "
                "step>], graph_break={})\n")
    text = ("Traceback (most recent call last):\n  File \"/w/step.py\", line 14, in <module>\n"
            "    assert 'scale' not in state\nAssertionError: state after the compiled step: {'scale': 2.0}\n")
    assert classify(compiled.format("False") + text, 1).category != "graph_break"
    assert classify(compiled.format("True") + text, 1).category == "graph_break"


def test_killed_from_outside_is_weak_evidence() -> None:
    d = BY_ID["local-gb_fullgraph_print"]
    c = classify(d["text"], signal_name="SIGKILL")  # e.g. a timeout kill after the error
    assert c.category == "graph_break"
    assert c.failure is not None and c.failure.exception_type == "torch._dynamo.exc.Unsupported"
    assert c.failure.signal_name == "SIGKILL"
    assert classify("step 1\nstep 2\n", signal_name="SIGKILL").category == "runtime_crash"


# --------------------------------------------------------------------------------------------
# dynamic_shapes / export / user_error, and the classes of miss seen on pasted text

_CONSTRAINT = (
    "Traceback (most recent call last):\n"
    '  File "/home/user/repro.py", line 9, in <module>\n'
    "    f(x)\n"
    '  File "/opt/venv/lib/python3.12/site-packages/torch/_dynamo/eval_frame.py", line 841, in compile_wrapper\n'
    "    raise e.with_traceback(None) from e.__cause__\n"
    "torch.fx.experimental.symbolic_shapes.ConstraintViolationError: Constraints violated (L['x'].size()[0])! "
    'For more information, run with TORCH_LOGS="+dynamic".\n'
    "  - Not all values of RelaxedUnspecConstraint(L['x'].size()[0]) are valid because L['x'].size()[0] was "
    "inferred to be a constant (5).\n"
)
_EXPORT_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/home/user/repro.py", line 12, in <module>\n'
    "    torch.export.export(M(), (x,), dynamic_shapes={'x': {0: batch}})\n"
    '  File "/opt/venv/lib/python3.12/site-packages/torch/export/__init__.py", line 311, in export\n'
    "    raise e\n"
    '  File "/opt/venv/lib/python3.12/site-packages/torch/export/_trace.py", line 2185, in _export\n'
    "    ep = _export_for_training(\n"
    "torch.fx.experimental.symbolic_shapes.ConstraintViolationError: Constraints violated (batch)! "
    'For more information, run with TORCH_LOGS="+dynamic".\n'
)


def test_constraint_violation_under_torch_compile_is_dynamic_shapes_not_export():
    c = classify(_CONSTRAINT)
    assert c.category == "dynamic_shapes" and c.confidence >= 0.8 and c.compile_mode == "torch.compile"
    assert "export" not in c.secondary
    script = "import torch\n@torch.compile\ndef f(x):\n    return x * 2 if x.size(0) == 5 else x\n"
    assert classify(_CONSTRAINT, script_text=script).category == "dynamic_shapes"


def test_constraint_violation_is_export_with_export_in_frames_or_script():
    c = classify(_EXPORT_FRAMES)
    assert c.category == "export" and "dynamic_shapes" in c.secondary
    bare = _CONSTRAINT.replace('  File "/opt/venv/lib/python3.12/site-packages/torch/_dynamo/eval_frame.py", '
                               "line 841, in compile_wrapper\n    raise e.with_traceback(None) from e.__cause__\n", "")
    assert classify(bare).category == "dynamic_shapes"
    script = "import torch\nep = torch.export.export(M(), (x,), dynamic_shapes=shapes)\n"
    c = classify(bare, script_text=script)
    assert c.category == "export" and c.compile_mode in ("strict_export", "non_strict_export")


def test_dynamo_names_in_the_text_of_an_export_only_script_do_not_make_it_torch_compile():
    text = ("[rank0]: V1205 torch/_dynamo/utils.py:1 [0/0] traced\nTraceback (most recent call last):\n"
            '  File "/w/repro.py", line 19, in <module>\n    torch.testing.assert_close(exported, eager)\n'
            "AssertionError: Tensor-likes are not close!\n")
    exported = "import torch\nep = torch.export.export(M(), (x,)).run_decompositions()\n"
    assert classify(text).compile_mode == "torch.compile"
    assert classify(text, script_text=exported).compile_mode == "non_strict_export"
    both = exported + "f = torch.compile(g)\n"
    assert classify(text, script_text=both).compile_mode == "torch.compile"


@pytest.mark.parametrize("line", [
    "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode: Could not guard on data-dependent "
    "expression Eq(u0, 1) (unhinted: Eq(u0, 1)).  (Size-like symbols: u0)",
    "torch.fx.experimental.symbolic_shapes.PendingUnbackedSymbolNotFound: Pending unbacked symbols {u1} not in "
    "returned outputs",
    "torch._dynamo.exc.InternalTorchDynamoError: PendingUnbackedSymbolNotFound: Pending unbacked symbols {zuf1} "
    "not in returned outputs (FakeTensor(..., size=(8,)),) .",
])
def test_data_dependent_and_unbacked_errors_are_dynamic_shapes(line):
    assert classify(line).category == "dynamic_shapes"


def test_user_error_is_a_category_the_text_never_gives():
    assert "user_error" in CATEGORIES and "dynamic_shapes" in CATEGORIES
    for d in PUBLIC + LOCAL + LOCAL_GPU + TUNING + TRAINING + HELDOUT:
        assert classify(d["text"], d.get("exit_code"), d.get("signal_name")).category != "user_error"


def test_fail_on_recompile_stance_is_recompile():
    text = ('  File "/opt/venv/lib/python3.12/site-packages/torch/_dynamo/eval_frame.py", line 251, in fail_callback\n'
            "    raise RuntimeError(message)\n"
            "RuntimeError: Detected recompile when torch.compile stance is 'fail_on_recompile'. filename: "
            "'repro.py', function name: 'f', line number: 3\n")
    c = classify(text)
    assert c.category == "recompile" and c.confidence >= 0.8


def test_printed_eager_vs_compiled_comparison_without_traceback_is_accuracy():
    text = ("Values differ (allclose failed)\nMax absolute difference: 0.25\n"
            "Results differ between eager and compiled\n")
    assert classify(text, exit_code=0).category == "accuracy"


def test_device_side_assert_from_a_generated_triton_kernel_is_triton():
    text = ("/tmp/torchinductor_user/ab/cabc.py:30: unknown: block: [7,0,0], thread: [48,0,0] "
            "Assertion `index out of bounds: 0 <= tmp4 < 32` failed.\n"
            "RuntimeError: Triton Error [CUDA]: device-side assert triggered\n")
    c = classify(text)
    assert c.category == "triton" and "runtime_crash" in c.secondary
    # an eager CUDA kernel's assert stays a runtime crash
    eager = ("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [3,0,0] "
             "Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.\n"
             "RuntimeError: CUDA error: device-side assert triggered\n")
    assert classify(eager).category == "runtime_crash"


_RICH = """\
╭───────────────────── Traceback (most recent call last) ──────────────────────╮
│ /home/user/repro/repro.py:14 in <module>                                     │
│                                                                              │
│ ❱ 14 │ f(x)                                                                  │
│                                                                              │
│ /opt/venv/lib/python3.12/site-packages/torch/_inductor/lowering.py:455 in    │
│ wrapped                                                                      │
│                                                                              │
│ ╭──────────────────────────────── locals ────────────────────────────────╮   │
│ │ args = (TensorBox(StorageBox(...)),)                                   │   │
│ ╰────────────────────────────────────────────────────────────────────────╯   │
╰──────────────────────────────────────────────────────────────────────────────╯
AssertionError: index out of range in lowering
"""


def test_rich_traceback_frames_are_parsed():
    from pt2_bug_basher.analysis.failure import parse

    p = parse(_RICH)
    frames = [(f.file.rsplit("/", 1)[-1], f.line, f.function) for b in p.blocks for f in b.frames]
    assert frames == [("repro.py", 14, "<module>"), ("lowering.py", 455, "wrapped")]
    c = classify(_RICH)
    assert c.category == "backend_compiler_failed"
    assert c.failure is not None and c.failure.exception_type == "AssertionError"


_BARE_ASSERT = ('Traceback (most recent call last):\n  File "/home/user/repro.py", line 15, in <module>\n'
                "    {code}\nAssertionError\n")


def test_bare_assert_after_comparing_compiled_and_eager_is_accuracy_with_low_confidence():
    c = classify(_BARE_ASSERT.format(code="assert torch.allclose(compiled_out, eager_out)"))
    assert c.category == "accuracy" and c.confidence < 0.6
    real = classify("AssertionError: Tensor-likes are not close!\n\nMismatched elements: 3 / 8 (37.5%)\n")
    assert real.category == "accuracy" and real.confidence > c.confidence


def test_bare_assert_unrelated_to_compilation_stays_unknown():
    c = classify(_BARE_ASSERT.format(code="assert len(sys.argv) > 1"))
    assert c.category == "unknown" and c.confidence <= 0.5


def test_tuning_corpus_is_classified_right():
    def right(d: dict, category: str) -> bool:
        return category in {d["label"], *d.get("also", [])}
    wrong = [(d["id"], classify(d["text"]).category) for d in TUNING if not right(d, classify(d["text"]).category)]
    assert wrong == []


# --------------------------------------------------------------------------------------------
# Classes of real text added with the third held-out batch (tuning samples from public issues and
# from the scripts in tests/data/corpus/scripts_tuning*)

TUNING_BY_ID = {d["id"]: d for d in TUNING}


def test_every_tuning_and_heldout_sample_names_its_source():
    for d in TUNING + TRAINING + HELDOUT:
        assert d["label"] and d["text"].strip(), d["id"]
        if d["id"].startswith(("tu-local-", "tu-gpu-")):
            assert d["script_name"] and d["script"] and d["source"].startswith("local torch"), d["id"]
        else:
            assert d["url"] and d["url"].startswith("https://github.com/"), d["id"]
    ids = [d["id"] for d in TUNING + TRAINING + HELDOUT]
    assert len(ids) == len(set(ids))
    urls = [d["url"] for d in TUNING + TRAINING + HELDOUT + PUBLIC if d.get("url")]
    assert len(urls) == len(set(urls)), "an issue is in two corpora (or twice in one)"


def test_printed_eager_and_compiled_values_without_traceback_are_accuracy():
    # pytorch/pytorch#126848: the whole output of a script printing eager and compiled results
    d = TUNING_BY_ID["tu3-acc-03"]
    c = classify(d["text"], exit_code=0)
    assert c.category == "accuracy"
    evidence_has(c, d["text"], "Compile: tensor(0.)")
    evidence_has(c, d["text"], "Eager (before): tensor(8.8162e-39)")


def test_printed_results_named_with_a_dtype_and_an_identifier_suffix_are_accuracy():
    # pytorch/pytorch#128306: `bf16 eager_res is: tensor(...)` and `bf16 inductor res is: tensor(...)`
    d = TUNING_BY_ID["tu7-acc-02"]
    c = classify(d["text"], exit_code=0)
    assert c.category == "accuracy"
    assert {e.rule for e in c.evidence} >= {"eager_output_print", "compiled_output_print"}
    # a dtype before another word is no label
    assert classify("bf16 weights: tensor([1., 2.])\n", exit_code=0).category == "unknown"


def test_inductor_graph_lowering_frames_are_compile_time():
    # pytorch/pytorch#110696: pytest frames ending in GraphLowering.run are Inductor lowering the
    # graph (compile time), not the compiled code running
    d = TUNING_BY_ID["tu7-ds-06"]
    assert _classify(d).category == "backend_compiler_failed"


def test_printed_allclose_false_and_difference_are_weak_accuracy():
    # pytorch/pytorch#141436: `print(torch.allclose(out_eager, out_compiled))` then the max diff
    d = TUNING_BY_ID["tu3-acc-01"]
    c = classify(d["text"], exit_code=0)
    assert c.category == "accuracy" and c.confidence < 0.8
    assert {e.rule for e in c.evidence} >= {"printed_false", "printed_difference"}


def test_timings_and_code_are_not_printed_results():
    for line in ("eager: 1.23x speedup", "compiled: 3.2 s", "Eager mode: 12.3 ms",
                 "compiled = torch.compile(f)", "Compiled result type: <class 'torch.Tensor'>"):
        assert classify(line + "\n", exit_code=0).category == "unknown", line


def test_unittest_assert_true_allclose_without_frames_is_accuracy():
    # pytorch/pytorch#131822: the failing line and "AssertionError: False is not true", no frames
    d = TUNING_BY_ID["tu3-acc-06"]
    c = classify(d["text"])
    assert c.category == "accuracy" and c.confidence < 0.6
    # the same message after an unrelated check stays unknown: it names nothing of torch
    assert classify("self.assertTrue(os.path.exists(path))\nAssertionError: False is not true\n").category == "unknown"


def test_jupyterlab_linked_frames_cut_where_dynamo_calls_the_backend():
    # unslothai/unsloth#2230: JupyterLab renders frames as `File [~/...py:3048](http://...), in Cls.meth(...)`
    from pt2_bug_basher.analysis.failure import parse

    d = TUNING_BY_ID["tu3-bcf-02"]
    frames = [f for b in parse(d["text"]).blocks for f in b.frames]
    assert [(f.file.rsplit("/", 1)[-1], f.line, f.function) for f in frames] == [
        ("symbolic_convert.py", 3048, "InstructionTranslator.RETURN_VALUE"),
        ("symbolic_convert.py", 3033, "InstructionTranslator._return")]
    assert frames[-1].code == "self.output.compile_subgraph("
    c = classify(d["text"])
    assert c.category == "backend_compiler_failed" and c.confidence < 0.6


def test_rich_rendered_stance_failure_with_a_wrapped_message_is_recompile():
    # produced by scripts_tuning/rich_rc_stance.py: rich wraps the message and the frame locations
    d = TUNING_BY_ID["tu-local-rich_rc_stance"]
    assert "stance is \n'fail_on_recompile'" in d["text"]
    c = classify(d["text"], d.get("exit_code"))
    assert c.category == "recompile" and c.confidence >= 0.8
    assert c.failure is not None and c.failure.exception_type == "RuntimeError"


def test_logged_shape_env_guard_error_cut_inside_its_traceback_is_dynamic_shapes():
    # produced by scripts_tuning/ds_shape_env_guard_excerpt.py (torch 2.13), cut before the exception line
    d = TUNING_BY_ID["tu-local-ds_shape_env_guard_excerpt"]
    assert "ConstraintViolationError" not in d["text"] and "in SHAPE_ENV" in d["text"]
    c = classify(d["text"], d.get("exit_code"))
    assert c.category == "dynamic_shapes" and "dynamo_internal" not in c.secondary
    evidence_has(c, d["text"], "Source: shape_env")


# --------------------------------------------------------------------------------------------
# Classes of real text added with the fourth held-out batch (tu4-* from public issues, tu-gpu-* from
# scripts_tuning_gpu run on an H200)


def test_traceback_cut_in_aot_autograds_compile_wrappers_is_a_backend_failure():
    # pytorch/pytorch#147756: cut in jit_compile_runtime_wrappers.aot_dispatch_base, which compiles (not runtime)
    d = TUNING_BY_ID["tu4-bcf-01"]
    assert "jit_compile_runtime_wrappers.py" in d["text"].splitlines()[-1]
    c = classify(d["text"])
    assert c.category == "backend_compiler_failed" and c.phase == "backend_compile"
    evidence_has(c, d["text"], "aot_dispatch_base")
    # the same file's compiled forward runs at runtime
    ran = ('Traceback (most recent call last):\n'
           '  File "/v/torch/_functorch/_aot_autograd/jit_compile_runtime_wrappers.py", line 9, in forward\n'
           '    return compiled_fw(args)\n'
           'RuntimeError: boom\n')
    assert classify(ran).category == "runtime_crash"


def test_generic_error_about_a_symint_is_dynamic_shapes():
    # pytorch/pytorch#102540: TypeError raised while Dynamo runs a module with symbolic sizes
    d = TUNING_BY_ID["tu4-ds-01"]
    c = classify(d["text"])
    assert c.category == "dynamic_shapes"
    evidence_has(c, d["text"], "found element of type SymInt")
    # a type error without a SymInt: no rule reads it as dynamic shapes
    assert classify("TypeError: unflatten(): argument 'sizes' must be tuple of ints\n").category != "dynamic_shapes"


def test_notebook_traceback_pasted_in_a_markdown_quote_is_parsed():
    # pytorch/pytorch#90540: `>    ~/anaconda3/.../torch/_inductor/overrides.py in __torch_function__(self,`
    from pt2_bug_basher.analysis.failure import parse

    d = TUNING_BY_ID["tu4-bcf-02"]
    frames = [f for b in parse(d["text"]).blocks for f in b.frames]
    assert [f.file.rsplit("/", 1)[-1] for f in frames] == ["overrides.py", "__init__.py", "proxy_tensor.py"]
    assert frames[0].function == "__torch_function__" and frames[0].in_torch
    assert classify(d["text"]).category == "backend_compiler_failed"
    # pytorch/pytorch#101604: only the header is quoted (`> Traceback ...`); the assertion is read
    d = TUNING_BY_ID["tu4-acc-02"]
    c = classify(d["text"])
    assert c.category == "accuracy" and c.failure is not None and c.failure.exception_type == "AssertionError"
    # a REPL prompt is not a quote
    assert classify(">>> import torch\n>>> x = 1\n>>> y = 2\n").category == "unknown"


def test_symbolic_shapes_log_alone_is_weak_dynamic_shapes():
    # pytorch/pytorch#105524: create_symbol / guard-added INFO lines and nothing else
    d = TUNING_BY_ID["tu4-ds-02"]
    c = classify(d["text"])
    assert c.category == "dynamic_shapes" and c.confidence < 0.5
    evidence_has(c, d["text"], "[guard added]")
    # next to a real failure the log does not decide
    with_break = d["text"] + ("\ntorch._dynamo.exc.Unsupported: Call to `torch._dynamo.graph_break()`\n"
                              "  Explanation: User-inserted graph break. Message: None\n")
    assert classify(with_break).category == "graph_break"


def test_failing_guard_log_is_dynamic_shapes():
    # pytorch/pytorch#114590: "Failing guard allocated at:" then a pytest-style traceback cut in guard building
    d = TUNING_BY_ID["tu4-ds-03"]
    c = classify(d["text"])
    assert c.category == "dynamic_shapes"
    evidence_has(c, d["text"], "Failing guard allocated at:")


def test_error_pasted_as_a_comment_naming_inductor_code_is_a_backend_failure():
    # pytorch/pytorch#102590: the error is a comment under the failing call in the repro
    d = TUNING_BY_ID["tu4-bcf-05"]
    c = classify(d["text"])
    assert c.category == "backend_compiler_failed"
    assert c.failure is not None and c.failure.exception_type == "AssertionError"
    # a generic error that names no Inductor code stays unknown
    assert classify("    out = f(x)\n    # AssertionError: shapes differ\n").category == "unknown"


def test_device_asserts_from_generated_triton_kernels_name_triton():
    # scripts_tuning_gpu/*.py run with torch 2.11 on an H200 (one rendered by rich): the CUDA error is the
    # runtime crash; the assertion lines printed by the generated kernel make Triton a named category
    gpu = [d for d in TUNING if d["id"].startswith("tu-gpu-")]
    assert len(gpu) == 4
    for d in gpu:
        c = classify(d["text"], d.get("exit_code"))
        assert c.category == "runtime_crash", d["id"]
        assert ("triton" in c.secondary) == (d["label"] == "triton"), d["id"]


def test_equal_printed_eager_and_compiled_values_are_no_accuracy_evidence():
    # bench/realworld scripts print both results; with compilation off (TORCHDYNAMO_DISABLE=1) they agree,
    # and that run must not count as a wrong result (bcf_cummin_bad_dim prints these two lines)
    assert classify("eager: tensor([])\ncompiled: tensor([])\n", exit_code=0).category == "unknown"
    assert classify("eager: inf compiled: inf\n", exit_code=0).category == "unknown"
    assert classify("eager: tensor([1., 2.]) compiled: tensor([1., 3.])\n", exit_code=0).category == "accuracy"
    # values printed over several lines are not compared from their first line
    two_rows = "eager: tensor([[1., 2.],\n        [3., 4.]])\ncompiled: tensor([[1., 2.],\n        [3., 5.]])\n"
    assert classify(two_rows, exit_code=0).category == "accuracy"


# --------------------------------------------------------------------------------------------
# Classes of real text added with the fifth held-out batch (tu5-* from public issues: even issue
# numbers and other repositories)


def test_after_aot_debug_wrapper_is_compile_time():
    # pytorch/pytorch#140220: cut in after_aot.debug_wrapper, which calls the compiler (not a runtime frame)
    d = TUNING_BY_ID["tu5-bcf-01"]
    assert "in debug_wrapper" in d["text"].splitlines()[-2]
    c = classify(d["text"])
    assert c.category == "backend_compiler_failed" and c.phase == "backend_compile"
    evidence_has(c, d["text"], "after_aot.py")
    # the same file's deferred_for_real_inputs runs the compiled graph
    ran = ('Traceback (most recent call last):\n'
           '  File "/v/torch/_dynamo/repro/after_aot.py", line 9, in deferred_for_real_inputs\n'
           '    return inner_compiled_fn(real_inputs)\n'
           'RuntimeError: boom\n')
    assert classify(ran).category == "runtime_crash"


def test_traceback_cut_below_a_call_of_torch_dynamo_export_is_export():
    # pytorch/pytorch#129534: the ONNX exporter calls torch._dynamo.export; the excerpt ends in eval_frame
    d = TUNING_BY_ID["tu5-exp-01"]
    c = classify(d["text"])
    assert c.category == "export" and c.confidence < 0.6
    evidence_has(c, d["text"], "in generate_fx")  # the frame whose line calls torch._dynamo.export
    # the same frames below a torch.compile'd call say nothing to the rules and the fallback (the learned
    # guess has seen this very text labelled export)
    compiled = d["text"].replace("torch._dynamo.export(", "torch.compile(")
    assert classify(compiled, text_model=None).category == "unknown"


def test_guard_creation_stack_is_weak_dynamic_shapes_not_an_error_location():
    # pytorch/pytorch#144852: only the `Created at:` stack of a guard whose creation failed (Dynamo's
    # output_graph frames, which would otherwise read as a Dynamo internal error)
    d = TUNING_BY_ID["tu5-exp-02"]
    c = classify(d["text"])
    assert c.category == "dynamic_shapes" and c.confidence < 0.5 and "dynamo_internal" not in c.secondary
    assert {e.rule for e in c.evidence} == {"guard_creation_failed"}
    # pytorch/pytorch#122294: with the shape_env guard's description the same log is stronger
    assert classify(TUNING_BY_ID["tu5-ds-03"]["text"]).confidence > c.confidence


def test_printed_nan_checks_that_differ_between_eager_and_compiled_are_accuracy():
    # pytorch/pytorch#178084: `mode cuda+float32+eager: has_nan=False` then `...+compile: has_nan=True`
    d = TUNING_BY_ID["tu5-acc-03"]
    c = classify(d["text"], exit_code=0)
    assert c.category == "accuracy"
    evidence_has(c, d["text"], "compile: has_nan=True")
    same = "eager: has_nan=False, has_inf=False\ncompiled: has_nan=False, has_inf=False\n"
    assert classify(same, exit_code=0).category == "unknown"
    assert classify("has_nan=False\nhas_nan=True\n", exit_code=0).category == "unknown"  # no side named


def test_inductors_bounds_assert_failing_on_the_device_is_triton():
    # pytorch/pytorch#100530: `Assertion \`index out of bounds: 0 <= tmp4 < 24\` failed` at a frozen-importlib
    # location (not Triton's `unknown:`): the bounds check of a generated kernel
    d = TUNING_BY_ID["tu5-tr-05"]
    c = classify(d["text"])
    assert c.category == "triton" and "runtime_crash" in c.secondary
    # eager's own indexing assert stays a runtime crash
    eager = ('/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:142: operator(): block: [0,0,0], thread: [90,0,0] '
             'Assertion `index >= -sizes[i] && index < sizes[i] && "index out of bounds"` failed.\n')
    assert classify(eager).category == "runtime_crash"


# --------------------------------------------------------------------------------------------
# The fallback (analysis/fallback.py): a best guess for text no rule places, built on the sixth
# round's tuning samples and on cuts of earlier ones. It answers with a confidence under any rule's
# and evidence lines whose rule names say what decided.

def _cut_before(text: str, needle: str) -> str:
    """`text` cut at the line boundary before the last line that contains `needle`."""
    at = text.rfind(needle)
    assert at >= 0, needle
    return text[:text.rfind("\n", 0, at)]


def _cut_through(text: str, needle: str) -> str:
    """`text` up to and including the first line that contains `needle`."""
    lines = text.split("\n")
    end = next((i for i, line in enumerate(lines) if needle in line), None)
    assert end is not None, needle
    return "\n".join(lines[:end + 1])


def _assert_fallback(c: Classification, category: str, text: str, needle: str, rule: str) -> None:
    assert c.category == category, (c.category, [e.rule for e in c.evidence])
    assert 0.05 <= c.confidence <= fallback.MAX_CONFIDENCE
    assert all(e.rule.startswith("fallback:") for e in c.evidence)
    assert any(e.rule == rule for e in c.evidence), [e.rule for e in c.evidence]
    evidence_has(c, text, needle)


def test_fallback_is_never_as_sure_as_a_lone_weak_rule():
    # pytorch/pytorch#150980: an autotuning log, no exception: Inductor's select_algorithm logged it and
    # the lines talk about Triton configs
    d = TUNING_BY_ID["tu6-tr-02"]
    c = classify(d["text"])
    _assert_fallback(c, "triton", d["text"], "select_algorithm.py:1905]", "fallback:log_source")
    # the weakest rule alone (a graph-break mention, weight 1.0) still reads surer than any fallback guess
    assert classify("some output\ngraph breaks happened\n").confidence > fallback.MAX_CONFIDENCE


def test_fallback_reads_words_of_a_prefixed_log_the_parser_does_not_know():
    # pytorch/pytorch#111636: `[default0]:RuntimeError: Cannot call sizes() on tensor with symbolic
    # sizes/strides` (an elastic-launch prefix no parser strips): the words say dynamic shapes, and
    # `sizes/strides` is a phrase, not a file path. Since the eighth round a line rule places it first.
    d = TUNING_BY_ID["tu6-ds-03"]
    c = classify(d["text"])
    assert c.category == "dynamic_shapes" and c.evidence[0].rule == "symbolic_sizes_call"
    g = fallback.guess(d["text"], _fallback_frame_kind)
    assert g is not None and g.category == "dynamic_shapes"
    assert any("symbolic sizes/strides" in line and rule == "fallback:words" for _, line, rule in g.evidence)


def test_fallback_reads_printed_eager_and_compiled_results_as_accuracy():
    # pytorch/pytorch#182012: `=== eager x.grad ===` and `=== compiled x.grad ===` above printed tensors
    d = TUNING_BY_ID["tu6-acc-02"]
    c = classify(d["text"])
    _assert_fallback(c, "accuracy", d["text"], "=== compiled x.grad ===", "fallback:printed_sides_differ")
    # one side alone is not enough, and both sides printing the same (compilation off) is no evidence
    assert classify(_cut_before(d["text"], "=== compiled x.grad ===")).category == "unknown"
    eager = d["text"][:d["text"].index("=== compiled x.grad ===")]
    same = eager + eager.replace("eager", "compiled")
    assert classify(same, exit_code=0).category == "unknown"


def test_fallback_traceback_cut_in_the_comparison_of_results_is_accuracy():
    # pytorch/pytorch (tu4-acc-03): assert_close's frames without the AssertionError below them
    d = TUNING_BY_ID["tu4-acc-03"]
    cut = _cut_before(d["text"], "AssertionError")
    c = classify(cut)
    _assert_fallback(c, "accuracy", cut, "testing/_comparison.py", "fallback:innermost_frame:compare")


def test_fallback_traceback_cut_where_dynamo_hands_the_graph_to_the_backend_is_backend():
    # pytorch/pytorch (tu3-bcf-03): rank-prefixed frames that end in compile_and_call_fx_graph
    cut = _cut_through(TUNING_BY_ID["tu3-bcf-03"]["text"], "in compile_and_call_fx_graph")
    c = classify(cut)
    _assert_fallback(c, "backend_compiler_failed", cut, "in compile_and_call_fx_graph",
                     "fallback:innermost_frame:compile")
    assert c.phase == "backend_compile"


def test_fallback_traceback_cut_in_the_fail_on_recompile_stance_is_recompile():
    d = TUNING_BY_ID["tu-local-rc_stance_fail_on_recompile"]
    cut = _cut_before(d["text"], "RuntimeError: Detected recompile")
    c = classify(cut)
    _assert_fallback(c, "recompile", cut, "in fail_callback", "fallback:innermost_frame:recompile")


def test_fallback_still_says_unknown_without_clear_evidence():
    # the same stance failure rendered by rich: its frames are boxed source listings, and the words of
    # torch's own source lines (`except (Unsupported, ...`) must not read as a graph break
    d = TUNING_BY_ID["tu-local-rich_rc_stance"]
    cut = _cut_before(d["text"], "RuntimeError: Detected recompile")
    assert "except (Unsupported" in cut
    c = classify(cut, text_model=None)  # the learned guess has seen these samples: the fallback alone
    assert c.category == "unknown" and c.evidence == []
    # pytorch/pytorch (tu3-exp-01): a counter dump `inductor []` is one weak word, under the threshold
    t = TUNING_BY_ID["tu3-exp-01"]["text"]
    cut = t[:t.index("inductor []") + len("inductor []")]
    assert classify(cut, text_model=None).category == "unknown"
    # a test path (`test/inductor/test_torchinductor.py`) is no Inductor evidence
    assert fallback.guess("test/inductor/test_torchinductor.py::CPUReproTests::test_x PASSED", _fallback_frame_kind) \
        is None


def test_fallback_never_overrides_a_rule():
    # pytorch/pytorch#117364: rules place it (AssertionError: Tensor-likes are not close!), so no
    # fallback evidence appears even though its frames and words would point elsewhere too
    d = TUNING_BY_ID["tu6-acc-01"]
    c = classify(d["text"])
    assert c.category == "accuracy" and c.confidence > 0.9
    assert not any(e.rule.startswith("fallback:") for e in c.evidence)


def test_fallback_answers_only_when_the_best_category_clearly_wins():
    # a cut in Dynamo's tracer counts for graph_break and dynamo_internal alike: no answer without words
    d = TUNING_BY_ID["tu3-bcf-03"]
    lines = d["text"].split("\n")
    end = next(i for i, ln in enumerate(lines) if "in RETURN_VALUE" in ln)
    tracer_cut = "\n".join(lines[:end])
    g = fallback.guess(tracer_cut, _fallback_frame_kind)
    assert g is None
    assert classify(tracer_cut, text_model=None).category == "unknown"
    # only the learned guess is left, and it says it is one
    c = classify(tracer_cut)
    assert guessed(c) and {e.rule for e in c.evidence} == {"fallback:learned"} and c.confidence <= 0.2


def test_fallback_reads_the_subsystem_that_logged_a_line():
    # pytorch/pytorch (tu4-ds-02): its first line alone, `[...] torch.fx.experimental.symbolic_shapes: [INFO]
    # 0.0: create_env`, names no failure; the logger (the symbolic-shapes engine) is weak dynamic-shapes evidence
    d = TUNING_BY_ID["tu4-ds-02"]
    first = d["text"].split("\n")[0]
    c = classify(first)
    _assert_fallback(c, "dynamic_shapes", first, "create_env", "fallback:log_source")
    # the same line from glog (TORCH_LOGS), pytorch/pytorch (tu5-ds-04)
    glog = TUNING_BY_ID["tu5-ds-04"]["text"].split("\n")[0]
    assert "symbolic_shapes.py:" in glog
    _assert_fallback(classify(glog), "dynamic_shapes", glog, "create_env", "fallback:log_source")
    # Dynamo's tracing log is printed by every compile: no evidence of any failure
    assert classify("[2023-12-18 18:21:07,432] torch._dynamo.symbolic_convert: [INFO] Step 1: torchdynamo start "
                    "tracing __getitem__").category == "unknown"


def test_fallback_does_not_guess_at_an_exception_no_rule_knows():
    """A user's ValueError raised under a test's assertEqual (what pytest printed for a registered test) stays
    `unknown`: the fallback reads text without an exception, where the comparison of results was guessed."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/repo/test/test_ops.py", line 14, in test_double_large\n'
        "    self.assertEqual(double(21), 42)\n"
        '  File "/repo/pkg/ops.py", line 3, in double\n'
        '    raise ValueError(f"double() cannot take {x}")\n'
        "ValueError: double() cannot take 21\n"
    )
    assert classify(text, exit_code=1).category == "unknown"
    cut = text.rsplit("ValueError:", 1)[0].replace("pkg/ops.py", "torch/testing/_comparison.py")
    assert classify(cut, exit_code=1).category == "accuracy"  # the same frames, cut before any exception


def test_traceback_cut_where_the_tracer_returns_is_backend():
    # pytorch/pytorch (tu3-bcf-02): JupyterLab frames cut in RETURN_VALUE / _return: tracing is done
    # and the graph goes to the backend next
    assert classify(_cut_through(TUNING_BY_ID["tu3-bcf-02"]["text"], "_return(inst)")).category == (
        "backend_compiler_failed")


def test_a_frame_precompiling_a_kernel_is_triton():
    # pytorch/torchdynamo (tr-005): cut in codecache._load_kernel whose line is `kernel.precompile()`
    assert classify(_cut_through(BY_ID["tr-005"]["text"], "kernel.precompile()")).category == "triton"


def test_a_test_file_named_after_inductor_is_not_generated_code():
    # pytorch/pytorch (tu6-acc-01): `test/inductor/test_torchinductor.py` is the test, not Inductor's
    # output; a traceback cut there says nothing about the compiled code running
    d = TUNING_BY_ID["tu6-acc-01"]
    cut = _cut_before(d["text"], "AssertionError")
    assert classify(cut).category in ("accuracy", "unknown")
    assert _fallback_frame_kind(Frame(file="/home/u/pytorch/test/inductor/test_torchinductor.py", line=7077,
                                      function="test_x", in_torch=False)) == "user"
    assert _fallback_frame_kind(Frame(file="/tmp/torchinductor_u/ab/cab.py", line=3,
                                      function="call", in_torch=False)) == "generated"


def test_source_lines_naming_eager_and_compile_are_not_printed_results():
    # pytorch/pytorch#104092 (tu7-di-03): the user frame's line `print(torch.compile(f, backend='eager')())`
    d = TUNING_BY_ID["tu7-di-03"]
    lines = d["text"].split("\n")
    for end in range(2, len(lines) - 2):
        assert classify("\n".join(lines[:end])).category in ("dynamo_internal", "unknown"), end
    code = "out = torch.compile(model, backend='eager')(x)\nprint(torch.compile(g, backend='eager')(y))\n"
    assert classify(code).category == "unknown"


def test_fallback_frames_of_the_triton_launcher_and_of_dynamo_export():
    # the launcher Inductor generates for a Triton kernel: `File "<string>", line 8, in launcher`
    assert _fallback_frame_kind(Frame(file="<string>", line=8, function="launcher", in_torch=False)) == "triton"
    # torch._dynamo.export's inner function (IPython names it export.<locals>.inner)
    inner = Frame(file="/opt/conda/lib/python3.10/site-packages/torch/_dynamo/eval_frame.py", line=1382,
                  function="export.<locals>.inner", in_torch=True)
    assert _fallback_frame_kind(inner) == "export"
    assert classify(_cut_through(TUNING_BY_ID["tu-tr-01"]["text"], "in launcher")).category == "triton"


def test_fallback_reads_the_recompile_limit_warnings_function_line():
    # pytorch/pytorch (tu3-rc-01): only `function: 'forward' (/workspace/.../detail_capture.py:131)` survives
    d = TUNING_BY_ID["tu3-rc-01"]
    first = d["text"].split("\n")[0]
    c = classify(first)
    _assert_fallback(c, "recompile", first, "function: 'forward'", "fallback:line_shape")
    assert classify("calling function: 'forward' of the model\n").category == "unknown"


def test_an_internal_assert_met_on_fake_tensors_is_dynamo_internal_and_other_fake_errors_are_not():
    # scripts_tuning/di_fake_tensor_internal_assert.py: Dynamo runs vmap(jacfwd(f)) on fake tensors and
    # functorch's dual-number unpacking breaks its own invariant
    text = TUNING_BY_ID["tu-local-di_fake_tensor_internal_assert"]["text"]
    c = classify(text)
    assert c.category == "dynamo_internal", c
    assert any(e.rule == "exception:internal_assert_in_fake_run" for e in c.evidence)
    # the same exception with the user's own shape error inside stays undecided by text alone
    cut = text.replace("INTERNAL ASSERT FAILED at", "shape mismatch at").replace("please report a bug to PyTorch",
                                                                                 "check your inputs")
    assert classify(cut).category == "unknown"


# --------------------------------------------------------------------------------------------
# Eighth round (tu8-*): symbolic sizes met in a fake run, cudagraph outputs overwritten, assert_close's
# metadata check, explain()'s summary, the graph-break logger's name, GitHub Actions timestamps

@pytest.mark.parametrize(("sample_id", "category", "rule"), [
    ("tu8-ds-01", "dynamic_shapes", "exception:fake_run_with_symbolic_sizes"),
    ("tu8-ds-02", "dynamic_shapes", "exception:symbolic_value"),
    ("tu8-rt-02", "runtime_crash", "cudagraph_output_overwritten"),
    ("tu8-acc-03", "accuracy", "attribute_mismatch"),
    ("tu8-gb-03", "graph_break", "explain_graph_break_count"),
    ("tu8-gb-02", "graph_break", "graph_breaks_log_tag"),
    ("tu8-di-03", "dynamo_internal", "torchdynamo_error_from_offset"),
])
def test_eighth_round_classes(sample_id: str, category: str, rule: str) -> None:
    c = classify(TUNING_BY_ID[sample_id]["text"])
    assert c.category == category and rule in {e.rule for e in c.evidence}, (c.category, c.evidence)


def test_a_fake_run_header_without_symbolic_sizes_stays_unknown() -> None:
    header = ("torch._dynamo.exc.TorchRuntimeError: Failed running call_function <built-in method quantile>"
              "(*(FakeTensor(..., size=(8,)), FakeTensor(..., size=(3,))), **{}):")
    assert classify(header).category == "unknown"
    assert classify(header.replace("size=(8,)", "size=(s0,)")).category == "dynamic_shapes"
    no_break = classify("Graph Break Count: 0\nGraph Count: 1\n")
    assert "explain_graph_break_count" not in {e.rule for e in no_break.evidence}


def test_github_actions_timestamps_keep_the_indent_of_a_traceback() -> None:
    text = TUNING_BY_ID["tu8-ds-02"]["text"]
    assert strip_prefix("2023-08-22T00:39:23.2882332Z     return f(x)") == "    return f(x)"
    assert parse(text).final_exc.type == "RuntimeError"


def test_an_output_size_stride_assert_of_the_generated_code_is_a_runtime_crash() -> None:
    # scripts_tuning/rt_stride_assert.py: a custom op's fake kernel claims other strides than the real one
    # returns; only the asserting line of the generated code and the exception are kept, as they get pasted
    text = TUNING_BY_ID["tu-local-rt_stride_assert"]["text"]
    assert text.lstrip().startswith("assert_size_stride(")
    c = classify(text, text_model=None)
    assert c.category == "runtime_crash" and c.evidence[0].rule == "exception:size_stride_assert", c
    # a user's own assert about sizes is not Inductor's
    assert classify("    assert a.shape == b.shape\nAssertionError: expected same shapes\n",
                    text_model=None).category != "runtime_crash"


def test_a_guard_dynamo_failed_to_build_is_dynamo_internal_and_a_shape_env_guard_is_not() -> None:
    # the head of examples/dynamo_internal.py's output (torch 2.13 CPU): Dynamo logs the guard it could not
    # build before the exception; pasted without the exception, the guard's type still says whose it is
    head = "\n".join(f"E1204 15:18:44.128000 10406 torch/_guards.py:375] [0/0] {line}" for line in (
        "Error while creating guard:", "Name: \"L['t']\"", "    Source: local",
        "    Create Function: TENSOR_SUBCLASS_METADATA_MATCH", "    Guard Types: None", "    Code List: None"))
    c = classify(head, text_model=None)
    assert c.category == "dynamo_internal" and c.evidence[0].rule == "guard_build_failed", c
    shape_env = head.replace("TENSOR_SUBCLASS_METADATA_MATCH", "SHAPE_ENV").replace("L['t']", "")
    assert classify(shape_env, text_model=None).category == "dynamic_shapes"


def test_dynamos_entry_frames_tell_no_phase() -> None:
    # the head of examples/runtime_error.py's traceback (torch 2.13 CPU), cut below eval_frame's _fn: the same
    # frames start a compile and a run of the compiled code, so no phase is read from them
    site = "/v/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py"
    head = ("Traceback (most recent call last):\n"
            '  File "/w/runtime_error.py", line 27, in <module>\n    f(torch.randn(8))\n'
            f'  File "{site}", line 1166, in compile_wrapper\n    result = fn(*args, **kwargs)\n'
            '  File "/w/runtime_error.py", line 21, in f\n    @torch.compile(backend="inductor")\n'
            f'  File "{site}", line 1446, in _fn\n    return fn(*args, **kwargs)\n')
    assert classify(head, text_model=None).phase is None
    below = head + ('  File "/v/lib/python3.11/site-packages/torch/_functorch/aot_autograd.py", line 1277, '
                    'in forward\n    return compiled_fn(full_args)\n')
    assert classify(below, text_model=None).phase == "runtime"


# --------------------------------------------------------------------------------------------
# Tenth round (training.jsonl, tu10*-*): the CompileProfiler's recompile report, SymIntArrayRef's
# concrete-size check, an exported program called with another number of inputs

TRAINING_BY_ID = {d["id"]: d for d in TRAINING}


def test_tenth_round_classes() -> None:
    for sample_id, category, rule in (("tu10a-rc-05", "recompile", "profiler_recompile_report"),
                                      ("tu10c-ds-02", "dynamic_shapes", "symint_array_not_concrete"),
                                      ("tu10c-exp-03", "export", "exported_input_count")):
        c = classify(TRAINING_BY_ID[sample_id]["text"], text_model=None)
        assert c.category == category and rule in {e.rule for e in c.evidence}, (sample_id, c)
    for sample_id, category, rule in (("tu10-tr-01", "triton", "triton_pointer_argument"),
                                      ("tu10-exp-01", "export", "exception:SpecViolationError"),
                                      ("tu-local-acc_with_without_compile", "accuracy", "uncompiled_output_print")):
        d = TUNING_BY_ID[sample_id]
        text = d["text"] if rule != "triton_pointer_argument" else d["text"].splitlines()[-1]  # the launcher's line
        c = classify(text, d.get("exit_code"), text_model=None)
        assert c.category == category and rule in {e.rule for e in c.evidence}, (sample_id, c)
    # Dynamo's assert about one of its variable trackers, without the frames that show where it was raised
    assert_line = TRAINING_BY_ID["tu10a-di-02"]["text"].splitlines()[-1]
    assert assert_line.startswith("AssertionError: <class 'torch._dynamo.variables.")
    c = classify(assert_line, text_model=None)
    assert c.category == "dynamo_internal" and c.evidence[0].rule == "exception:dynamo_variable_assert", c
    assert classify("AssertionError: MyVariable must be set first\n", text_model=None).category != "dynamo_internal"
    # printed without and with compile, the same: no evidence of a wrong result
    same = "Without compile: tensor([0., 2.])\nWith compile: tensor([0., 2.])\n"
    assert classify(same, 0, text_model=None).category == "unknown"
    # the profiler's report of a run without recompiles gives no such evidence: its section header is printed in
    # every report, then torch's `No recompilation detected.` in place of the table
    report = TRAINING_BY_ID["tu10a-rc-05"]["text"]
    quiet = report[:report.index("Function ")] + "No recompilation detected.\n"
    assert "These subgraphs were recompiled more than once" in quiet
    assert classify(quiet, text_model=None).category == "unknown"
    # its graph-break table in the same report (`No graph breaks detected.` otherwise), as torch's tabulate prints it
    table = ("Graph Break Reason                     Count\n-----------------------------------  -------\n"
             "call_function BuiltinVariable(print)       1\n")
    broken = quiet.replace("No graph breaks detected.\n", table)
    c = classify(broken, text_model=None)
    assert c.category == "graph_break" and c.evidence[0].rule == "profiler_graph_break_report", c
    # functionalization's refusal of an in-place op on overlapping windows, pasted as its RuntimeError line only
    d = TUNING_BY_ID["tu-local-bcf_functionalize_overlap"]
    (refusal,) = [line for line in d["text"].splitlines() if line.startswith("RuntimeError: ")]
    c = classify(refusal, text_model=None)
    assert c.category == "backend_compiler_failed" and c.evidence[0].rule == "functionalization_refused", c
    assert classify(d["text"], d["exit_code"], text_model=None).category == "backend_compiler_failed"
    # a user's own input-count check is not export's
    own = "ValueError: Unexpected number of inputs for my layer\n"
    assert classify(own, text_model=None).category != "export"


def test_the_output_of_a_run_that_passed_is_not_guessed_at() -> None:
    # a passing run's warning names torch.onnx's exporter: no export failure, whatever its words
    warning = ("/usr/local/lib/python3.10/dist-packages/torch/onnx/_internal/exporter.py:130: UserWarning: "
               "torch.onnx.dynamo_export only implements opset version 18 for now.\n  warnings.warn(\n")
    assert classify(warning * 50, exit_code=0).category == "unknown"
    assert guessed(classify(warning * 50, exit_code=1))  # a failing run's output may still be guessed at


def test_a_lone_fake_run_error_is_read_with_its_reason_on_the_next_line():
    # the reason Dynamo's fake-tensor run gives follows the `Failed running call_function ...:` line
    header = ("torch._dynamo.exc.TorchRuntimeError: Failed running call_function <built-in function f>"
              "(*(FakeTensor(..., size=(16,)),), **{}):\n")
    c = classify(header + "Cannot call sizes() on tensor with symbolic sizes/strides\n")
    assert c.category == "dynamic_shapes" and any(e.rule == "exception:symbolic_in_fake_run" for e in c.evidence), c
    # without a reason that names symbolic sizes it stays a fake-run error of unknown kind (the compile-off run
    # decides whose it is)
    assert classify(header + "expected a tensor of rank 2\n", text_model=None).category == "unknown"


def test_an_attribute_missing_on_a_dynamo_variable_tracker_is_dynamo_internal():
    # vLLM's report (training tu11e-di-02): Dynamo wrapped it as InternalTorchDynamoError; raised bare, the
    # AttributeError names Dynamo's own object all the same
    text = next(d["text"] for d in TRAINING if d["id"] == "tu11e-di-02")
    assert "'SymNodeVariable' object has no attribute" in text
    bare = "AttributeError: 'SymNodeVariable' object has no attribute 'value'\n"
    c = classify(bare)
    assert c.category == "dynamo_internal" and [e.rule for e in c.evidence] == ["dynamo_variable_attribute"], c
    # an attribute missing on the user's own object is no evidence of Dynamo's bug
    assert classify("AttributeError: 'Config' object has no attribute 'value'\n", text_model=None).category == "unknown"


def test_a_source_line_a_traceback_shows_is_no_evidence_beside_the_exception_line():
    text = ("Traceback (most recent call last):\n"
            '  File "/x/torch/_dynamo/convert_frame.py", line 10, in _compile\n'
            "    raise InternalTorchDynamoError(\n"
            "torch._dynamo.exc.InternalTorchDynamoError: KeyError: 'reverse'\n")
    c = classify(text)
    assert c.category == "dynamo_internal"
    assert [e.text for e in c.evidence] == ["torch._dynamo.exc.InternalTorchDynamoError: KeyError: 'reverse'"], c
    # alone (a traceback cut above its exception line), the source line still counts
    cut = classify(text.rsplit("torch._dynamo.exc", 1)[0])
    assert cut.category == "dynamo_internal" and "raise InternalTorchDynamoError(" in cut.evidence[0].text, cut


_SITE = "/home/u/venv/lib/python3.11/site-packages"
_EVAL_FRAME = f"{_SITE}/torch/_dynamo/eval_frame.py"


def test_an_assertion_raised_in_a_compiled_graph_is_never_accuracy():
    """A backend put torch._assert(False, ...) in the graph: the AssertionError comes from its generated
    forward, not from the script comparing results, even where the script printed both results first."""
    text = ("eager: tensor([1.5403, 1.5403])\ncompiled: tensor([0.5403, 0.5403])\n"
            "Mismatched elements: 2 / 2 (100.0%)\nGreatest absolute difference: 1.0 at index (0,)\n"
            "Traceback (most recent call last):\n"
            '  File "/home/u/repro.py", line 24, in <module>\n    out = torch.compile(wave, backend=forbid)(x)\n'
            f'  File "{_EVAL_FRAME}", line 1166, in compile_wrapper\n    result = fn(*args, **kwargs)\n'
            '  File "/home/u/repro.py", line 19, in wave\n    def wave(x):\n'
            f'  File "{_EVAL_FRAME}", line 1446, in _fn\n    return fn(*args, **kwargs)\n'
            '  File "<eval_with_key>.1", line 6, in forward\n'
            f'  File "{_SITE}/torch/__init__.py", line 2279, in _assert\n    raise AssertionError(message)\n'
            "AssertionError: compiled differs from eager\n")
    result = classify(text, exit_code=1)
    assert result.category == "runtime_crash", result
    # the same lines from the script's own assert are accuracy
    own = text.replace('  File "<eval_with_key>.1", line 6, in forward\n', "").replace(
        f'  File "{_SITE}/torch/__init__.py", line 2279, in _assert\n    raise AssertionError(message)\n',
        '  File "/home/u/repro.py", line 30, in check\n    assert torch.allclose(eager, compiled)\n')
    assert classify(own, exit_code=1).category == "accuracy"


def test_a_backend_callable_raising_at_run_time_is_the_compiled_codes_failure_not_dynamos():
    text = ("Traceback (most recent call last):\n"
            '  File "/home/u/repro.py", line 24, in <module>\n    print(torch.compile(wave, backend=picky)(x))\n'
            f'  File "{_EVAL_FRAME}", line 1166, in compile_wrapper\n    result = fn(*args, **kwargs)\n'
            '  File "/home/u/repro.py", line 19, in wave\n    def wave(x):\n'
            f'  File "{_EVAL_FRAME}", line 1446, in _fn\n    return fn(*args, **kwargs)\n'
            '  File "/home/u/repro.py", line 12, in run\n    raise RuntimeError("picky: float32")\n'
            "RuntimeError: picky: float32\n")
    result = classify(text, exit_code=1)
    assert result.category == "runtime_crash" and result.phase == "runtime", result
    assert "frames:compiled_callable" in {e.rule for e in result.evidence}


@pytest.mark.parametrize("row", MESSAGE_RULES, ids=lambda row: row.rule)
def test_each_message_rule_places_its_example(row) -> None:
    """Adding a message rule is one row and its example: the row's rule places the example's final exception."""
    text = ("Traceback (most recent call last):\n  File \"/work/repro.py\", line 9, in <module>\n    f(x)\n"
            f"{row.example}\n")
    got = classify(text, exit_code=1)
    assert got.category == row.category, (row.rule, got.category, got.evidence)
    assert row.rule in [e.rule for e in got.evidence], (row.rule, got.evidence)
    assert row.types is None or row.example.split(":", 1)[0] in row.types


@pytest.mark.parametrize("row", REFINEMENTS, ids=lambda row: row.rule)
def test_each_refinement_moves_its_example(row) -> None:
    """Adding a refinement is one row and its example: the type rule places the example in `placed`, the row
    moves it to its category."""
    text = ("Traceback (most recent call last):\n  File \"/work/repro.py\", line 9, in <module>\n    f(x)\n"
            f"{row.example}\n")
    got = classify(text, exit_code=1)
    assert got.category == row.category, (row.rule, got.category, got.evidence)
    assert row.rule in [e.rule for e in got.evidence], (row.rule, got.evidence)
    short = row.example.split(":", 1)[0].rsplit(".", 1)[-1]
    assert row.type in (None, short)


@pytest.mark.parametrize("row", FRAME_KINDS, ids=lambda row: row.name)
def test_each_frame_kind_places_its_example(row) -> None:
    """Adding a frame kind is one row and its example: the row is the first that applies to its example frame
    (no earlier row catches it), and the frame gets the row's kind."""
    assert _frame_kind_row(row.example) is row, (row.name, _frame_kind_row(row.example).name)
    assert _frame_kind(row.example) == row.kind
    assert len({r.name for r in FRAME_KINDS}) == len(FRAME_KINDS)


VERBOSE_METRICS_AFTER_A_USER_ASSERTION = """\
Traceback (most recent call last):
  File "/tmp/u/repro.py", line 15, in <module>
    assert state["count"] == 1, f"count was not updated: {state}"
AssertionError: count was not updated: {'count': 0, 'last': None}
I1207 06:51:07.220000 9032 torch/_dynamo/utils.py:925] TorchDynamo compilation metrics:
I1207 06:51:07.220000 9032 torch/_dynamo/utils.py:925] Function, Runtimes (s)
I1207 06:51:07.220000 9032 torch/_dynamo/utils.py:925] _compile.compile_inner, 0.0874
I1207 06:51:07.220000 9032 torch/_dynamo/utils.py:925] OutputGraph.call_user_compiler, 0.0013
V1207 06:51:07.220000 9032 torch/fx/experimental/symbolic_shapes.py:241] lru_cache_stats size_hint: CacheInfo(hits=0)
"""


def test_the_compilation_metrics_logged_at_exit_are_neither_the_message_nor_a_backend_failure():
    """TORCHDYNAMO_VERBOSE (TORCH_LOGS=+dynamo) prints Dynamo's timing table at exit, after the traceback: its
    `OutputGraph.call_user_compiler, 0.0013` row is a timing, and its log records are not the message."""
    result = classify(VERBOSE_METRICS_AFTER_A_USER_ASSERTION)
    assert result.failure is not None
    assert result.failure.message == "count was not updated: {'count': 0, 'last': None}"
    assert result.category != "backend_compiler_failed" and result.phase != "backend_compile", result
    assert not [e for e in result.evidence if e.rule == "call_user_compiler"]
    # a traceback that was itself logged keeps its prefixed message lines
    logged = "".join(f"E1207 06:51:07.220000 9032 torch/_dynamo/x.py:1] {line}\n"
                     for line in ["Traceback (most recent call last):", '  File "/tmp/u/r.py", line 3, in f',
                                  "    g()", "RuntimeError: first line", "second line"])
    assert classify(logged).failure.message == "first line\nsecond line"
    # the rule still reads a frame that calls the backend
    from pt2_bug_basher.analysis.classify import RULES

    rule = next(r for r in RULES if r.name == "call_user_compiler")
    assert rule.pattern is not None
    assert rule.pattern.search('  File "/site/torch/_dynamo/output_graph.py", line 3119, in call_user_compiler')
    assert not rule.pattern.search("OutputGraph.call_user_compiler, 0.0013")
