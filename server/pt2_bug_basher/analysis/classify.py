"""Classify the error output of a PyTorch 2 compiler failure into a category.

Pure and fast (no torch import, no subprocess): a few milliseconds on a 1 MB log. Only text that
no rule places fits the learned model, once per process (about a second, step 5).

How it decides
--------------
1. ``failure.parse`` reads the final exception (and its chain, wrapped exception, frames) from the
   last traceback; the exception type, its message and the innermost frames are the strongest
   evidence ("structural" rules).
2. Line rules add evidence from the rest of the text: log lines (``Graph break in user code``,
   ``Recompiling function``, ``Accuracy failed``, ``Triton compilation failed``), crash lines
   (``Segmentation fault``, ``CUDA error: ...``) and exception names seen anywhere. A rule only
   runs on lines that contain one of its literal anchors; anchors are found with ``str.rfind``
   from the end of the text (every anchor in the last TAIL bytes, a few log-line anchors
   (HEAD_ANCHORS) also before it), so the cost is C-speed scans, not a regex per line.
3. Scores per category are summed; the best one wins. Fixed precedences on top: a Triton error
   wrapped in BackendCompilerFailed / InductorError is ``triton`` (``backend_compiler_failed``
   secondary); any error raised inside ``torch.export`` is ``export`` (the underlying category
   secondary); a recompile-limit ``Unsupported`` is ``recompile``.
4. When no rule finds anything, ``fallback.guess`` may name a category from where the frames are,
   which subsystem logged, the words of the text and printed results, with a low confidence.
5. When the fallback does not answer either, and the text is not the output of a run that passed,
   ``learned`` guesses from the words of the labelled corpus, with a lower confidence still: for text
   without an exception line, or with an exception no rule knows that torch's own code raised; one raised in the
   user's code, or a lone exception line, stays ``unknown``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from pt2_bug_basher.domain.names import CATEGORIES, USER_ERROR, Category

from . import fallback, learned
from .failure import (
    BACKEND_CALLS,
    EXTERNAL_SIGNALS,
    GENERATED_DIR,
    FailureRecord,
    Frame,
    LineIndex,
    ParsedFailure,
    _Block,
    _Exc,
    compiled_callable_frame,
    last_line,
    match_frame,
    parse,
    raised_in,
    record_from_parsed,
    strip_prefix,
)
from .learned import LearnedGuess, TextModel

CompileMode = Literal["torch.compile", "strict_export", "non_strict_export"]
Phase = Literal["trace", "backend_compile", "runtime"]
NOT_FROM_TEXT: tuple[Category, ...] = (USER_ERROR,)

TAIL = 64 * 1024  # every anchor is searched in the last TAIL bytes
MAX_HITS_PER_ANCHOR = 4  # occurrences of one anchor examined, from the end
MAX_EVIDENCE = 8
MAX_EVIDENCE_CHARS = 300


class EvidenceLine(BaseModel):
    line_no: int  # 1-based, counting "\n"-separated lines (as grep -n does)
    text: str  # the line verbatim (without its line break), at most 300 characters
    rule: str  # the rule that matched it


class Classification(BaseModel):
    category: Category
    secondary: list[Category]
    confidence: float
    evidence: list[EvidenceLine]
    compile_mode: CompileMode | None
    phase: Phase | None
    failure: FailureRecord | None


def guessed(classification: Classification) -> bool:
    """The category is the fallback's best guess: no rule placed the text (its evidence is fallback's only)."""
    return bool(classification.evidence) and all(e.rule.startswith("fallback:") for e in classification.evidence)



# --------------------------------------------------------------------------------------------
# Line rules

@dataclass(frozen=True)
class Rule:
    name: str
    category: str
    weight: float
    anchors: tuple[str, ...]  # literals; a line is examined only if it contains one of them
    pattern: re.Pattern[str] | None  # searched in the line; None: the anchor alone is enough


def _r(name: str, category: str, weight: float, anchors: str | tuple[str, ...], pattern: str | None = None) -> Rule:
    if isinstance(anchors, str):
        anchors = (anchors,)
    return Rule(name, category, weight, anchors, re.compile(pattern) if pattern else None)


# a dtype or device naming which run of the comparison a printed value belongs to: `bf16 eager: ...`
_VALUE_QUALIFIER = r"(?:(?:[bB]?[fF](?:16|32|64)|float(?:16|32|64)|half|double|cpu|CPU|cuda|CUDA|gpu|GPU)\W{1,3})?"

# `<label words>: <value>` where the value is a tensor, an array, a list or a number (not a timing)
_PRINTED_VALUE = (r"\b[^:=\n]{0,30}[:=]\s*(?:tensor\(|array\(|\[|[-+]?(?:\d|inf\b|nan\b))"
                  r"(?!.*(?:\d\s*(?:ms|us|s|sec|secs|seconds|it/s|x)\b|[Ss]peed-?up|[Tt]hroughput))")

RULES: tuple[Rule, ...] = (
    # graph breaks
    _r("unsupported_exception", "graph_break", 3.0, "Unsupported",
       r"^(?!.*(?:[Rr]ecompil\w* limit|recompile_limit|cache_size_limit))"
       r".*(?:\bUnsupported(?::|\s{2,}Traceback)|exc\.Unsupported\b)"),
    # the CompileProfiler report's table of graph-break reasons (`No graph breaks detected.` when there is none)
    _r("profiler_graph_break_report", "graph_break", 3.0, "Graph Break Reason", r"^Graph Break Reason +Count\b"),
    _r("graph_break_log", "graph_break", 3.0, ("raph break", "raph Break"),
       r"[Gg]raph [Bb]reak(?: in user code| from user code|:| [Rr]eason:)"),
    _r("graph_break_explanation", "graph_break", 1.5,
       ("Dynamo does not know how to trace", "Dynamo does not support tracing", "marked as skipped",
        "Dynamo purposely graph breaks")),
    _r("graph_break_site", "graph_break", 1.0, "compile-graph-break-site"),
    _r("graph_break_count", "graph_break", 2.0, ("graph_break_count", "Break reasons")),
    # dynamo.explain()'s printed summary: `Graph Break Count: 1`, then `Break Reasons:`
    _r("explain_graph_break_count", "graph_break", 3.0, "Graph Break Count:", r"Graph Break Count: [1-9]"),
    _r("graph_breaks_log_tag", "graph_break", 2.0, ("[__graph_breaks]", ".__graph_breaks: [")),
    # not `COMPILING GRAPH due to GraphCompileReason(..., graph_break=False)`: a compile at a return, no break
    _r("explain_break_reason", "graph_break", 2.5, "user_stack=[<FrameSummary",
       r"reason='[^\n]{0,1000}?', user_stack=\[<FrameSummary(?![^\n]*graph_break=False)"),
    # not a report of none (`No graph breaks detected.`), nor the CompileProfiler's header, printed in every report
    _r("graph_break_mention", "graph_break", 1.0, ("raph break", "raph-break", "RAPH BREAK"),
       r"(?i)^(?!.*\bno graph[ -]breaks?\b|\s*graph breaks happen when torchdynamo)(?=.*\bgraph[ -]breaks?\b)"),
    # backend compiler
    _r("backend_compiler_failed", "backend_compiler_failed", 3.0, "BackendCompilerFailed"),
    _r("backend_raised", "backend_compiler_failed", 3.0, "backend='", r"backend='[^']*' raised"),
    # AOTAutograd's functionalization refusing a mutation while the graph compiles (pasted without the
    # BackendCompilerFailed line above it)
    _r("functionalization_refused", "backend_compiler_failed", 3.0,
       "functionalization encountered a tensor being mutated"),
    _r("inductor_error", "backend_compiler_failed", 3.0, "InductorError"),
    _r("lowering_exception", "backend_compiler_failed", 2.5, "LoweringException"),
    _r("cpp_compile_error", "backend_compiler_failed", 2.5, ("CppCompileError", "C++ compile error")),
    _r("cuda_compile_error", "backend_compiler_failed", 2.5, ("CUDACompileError", "InvalidCxxCompiler")),
    # not a row of TORCHDYNAMO_VERBOSE's compilation metrics (`OutputGraph.call_user_compiler, 0.0013`)
    _r("call_user_compiler", "backend_compiler_failed", 1.0, "call_user_compiler", r"call_user_compiler(?!, \d)"),
    _r("generated_cpp_diagnostic", "backend_compiler_failed", 2.5, "torchinductor_",
       r"torchinductor_\S*\.(?:cpp|h|cu|c|cc|hpp)(?::\d+)+: (?:fatal )?(?:error|note|warning)\b"),
    # recompiles
    _r("fail_on_recompile_limit", "recompile", 4.0, "FailOnRecompileLimitHit"),
    _r("recompile_error", "recompile", 4.0, "RecompileError"),
    _r("fail_on_recompile_stance", "recompile", 4.0, "stance is 'fail_on_recompile'",
       r"Detected recompile when torch\.compile stance is 'fail_on_recompile'"),
    _r("recompile_limit_hit", "recompile", 3.0,
       ("recompile_limit reached", "cache_size_limit reached", "hit config.recompile_limit",
        "hit config.cache_size_limit", "recompile limit exceeded", "Recompile limit exceeded",
        "recompilation cache limit", "cache size limit"),
       r"hit (?:config\.)?(?:recompile_limit|cache_size_limit)|(?:recompile_limit|cache_size_limit) reached"
       r"|[Rr]ecompile limit exceeded|hit recompilation cache limit|cache size limit (?:hit|reached|exceeded)"),
    _r("recompiling_function", "recompile", 2.5, "Recompiling function", r"Recompiling function \S+ in "),
    # the CompileProfiler report (torch 2.0-2.5): its table of recompiled functions and the cache-limit advice,
    # printed only when something recompiled (its section header is printed in every report, with `No
    # recompilation detected.` when nothing did)
    _r("profiler_recompile_report", "recompile", 3.0, ("Recompile Reasons", "to avoid being cache limited"),
       r"\bRecompiles +Recompile Reasons\b|to avoid being cache limited"),
    _r("guard_failure", "recompile", 2.0, "triggered by the following guard failure"),
    _r("recompiles_log", "recompile", 1.0, "[__recompiles"),
    # accuracy
    _r("accuracy_error", "accuracy", 4.0, "AccuracyError"),
    _r("accuracy_failed", "accuracy", 3.5, ("Accuracy failed", "fail_accuracy", "accuracy failed")),
    _r("tensors_not_close", "accuracy", 3.5, ("Tensor-likes are not close", "Scalars are not close",
                                             "Tensor-likes are not equal", "Scalars are not equal")),
    _r("mismatched_elements", "accuracy", 3.0, "Mismatched elements:"),
    # assert_close comparing metadata first: `The values for attribute 'shape' do not match: ...`
    _r("attribute_mismatch", "accuracy", 3.0, "do not match",
       r"The values for attribute '\w+' do not match"),
    _r("greatest_difference", "accuracy", 1.5, "Greatest absolute difference"),
    _r("allclose_false", "accuracy", 3.0, "allclose", r"allclose\b.{0,200}?(?:[:=]|->|\bis|\breturned)\s*False\b"),
    _r("rmse", "accuracy", 2.5, "RMSE", r"RMSE \(res-fp64\)"),
    _r("mismatch_words", "accuracy", 1.5, ("ismatch", "ISMATCH"),
       r"(?i)(?:output|result|value|accuracy)s? mismatch|mismatch(?:es)? (?:between|vs\.?|against) "
       r"(?:the )?(?:eager|compiled|reference)"),
    _r("allclose_failed_print", "accuracy", 3.0, ("allclose failed", "not allclose", "allclose check failed")),
    _r("results_differ", "accuracy", 2.5, ("differ", "DIFFER"),
       r"(?i)(?:results?|outputs?|values?) (?:differ|are different)\b.{0,80}(?:eager|compiled?|original|reference)"
       r"|(?:eager|compiled?|original|reference)\b.{0,60}\b(?:results?|outputs?) differ"),
    _r("elements_not_close", "accuracy", 2.0, ("not close", "exceeding tolerance", "out-of-tolerance"),
       r"(?i)(?:elements?|values?) (?:not close|exceeding tolerance)|out-of-tolerance elements"),
    _r("max_diff_print", "accuracy", 1.5, ("ax diff", "ax_diff", "aximum diff", "ax absolute diff"),
       r"(?i)max(?:imum)?[ _](?:abs(?:olute)?[ _])?diff(?:erence)?\b\s*[:=(]"),
    # a script printing its eager and compiled results: `eager out: tensor(...)`, `Eager (before): tensor(...)`,
    # `Compile: tensor(0.)`, `compiled result = [...]`, `bf16 eager_res is: tensor(...)` (a value, not a timing)
    _r("eager_output_print", "accuracy", 1.5, ("eager", "Eager", "EAGER"),
       r"^\W{0,4}" + _VALUE_QUALIFIER + r"(?:eager|Eager|EAGER)(?:[ _](?:out|output|outputs|result|res)\b\s*[:=]|"
       r"(?:_\w+)?" + _PRINTED_VALUE + ")"),
    _r("compiled_output_print", "accuracy", 1.5, ("ompile", "OMPILE", "nductor", "ptimized"),
       r"^\W{0,4}" + _VALUE_QUALIFIER
       + r"(?:(?:compiled|Compiled|COMPILED|compile|Compile)[ _](?:out|output|outputs|result|res)\b\s*[:=]"
       r"|(?:compiled?|Compiled?|COMPILED?|[Ii]nductor|[Oo]ptimized)(?:_\w+)?" + _PRINTED_VALUE + ")"),
    # the same, labelled by whether compilation was on: `Without compile: 2 items`, `With torch.compile: ...`
    _r("uncompiled_output_print", "accuracy", 1.5,
       ("ithout compile", "ithout Compile", "ithout torch.compile", "o compile", "o Compile", "o torch.compile"),
       r"^\W{0,4}(?:[Ww]ithout|w/o|[Nn]o) (?:torch\.)?[Cc]ompiled?\s*[:=]\s*\S"),
    _r("with_compile_output_print", "accuracy", 1.5,
       ("ith compile", "ith Compile", "ith torch.compile", "ith_compile", "WITH COMPILE"),
       r"^\W{0,4}(?:[Ww]ith[ _](?:torch\.)?[Cc]ompiled?|WITH COMPILED?)\s*[:=]\s*\S"),
    # `print(torch.allclose(eager, compiled))` and `print("diff", (a - b).abs().max())` with nothing else
    _r("printed_false", "accuracy", 1.5, "False", r"^\s*False\s*$"),
    _r("printed_difference", "accuracy", 1.5, ("diff", "Diff", "DIFF"),
       r"^\W{0,4}(?:max[ _]?|abs[ _]?)*diff(?:erence)?s?\b[^:=\n]{0,30}?[:=]?\s*(?:tensor\(|[-+]?\d)"),
    _r("max_abs_error", "accuracy", 1.5, ("ax abs", "ax_abs", "aximum abs"),
       r"(?i)max(?:imum)?[ _]abs(?:olute)?[ _](?:diff|error|err)"),
    # dynamo internal
    _r("internal_dynamo_error", "dynamo_internal", 4.0, "InternalTorchDynamoError"),
    # `Error while creating guard:` with a guard type other than the shape env's: Dynamo failed to build
    # one of its own guards (a SHAPE_ENV guard is the dynamic-shapes rule's)
    _r("guard_build_failed", "dynamo_internal", 2.0, "Create Function: ",
       r"Create Function: (?!SHAPE_ENV\b)[A-Z_]{4,}"),
    # the first torchdynamo's report of an error while it transformed a frame's bytecode
    _r("torchdynamo_error_from_offset", "dynamo_internal", 2.5, "ERROR FROM offset=",
       r"^ERROR FROM offset=\d+ filename \S+ \d+ \w+"),
    # runtime crashes
    _r("segfault", "runtime_crash", 3.5, ("Segmentation fault", "SIGSEGV", "segmentation fault")),
    _r("fatal_signal", "runtime_crash", 3.5, ("SIGABRT", "SIGBUS", "SIGILL", "SIGFPE", "Fatal Python error",
                                               "core dumped", "Bus error", "Illegal instruction")),
    _r("cpp_terminate", "runtime_crash", 3.0, "terminate called after throwing"),
    _r("crash_handler_backtrace", "runtime_crash", 3.0, ("==== backtrace (", "Caught signal", "*** SIG")),
    _r("worker_terminated", "runtime_crash", 2.0, ("terminated abruptly", "BrokenProcessPool")),
    _r("cuda_error", "runtime_crash", 3.5,
       ("illegal memory access", "device-side assert", "misaligned address", "unspecified launch failure",
        "cudaErrorIllegalAddress", "cudaErrorAssert", "CUBLAS_STATUS_", "CUDNN_STATUS_", "HIP error")),
    _r("cuda_error_generic", "runtime_crash", 2.5, "CUDA error:"),
    # cudagraph trees: a later replay overwrote an output the program still reads
    _r("cudagraph_output_overwritten", "runtime_crash", 3.5, "output of CUDAGraphs that has been overwritten"),
    _r("cuda_kernel_assert", "runtime_crash", 3.0, "Assertion `", r"Assertion `[^`]{0,400}` failed"),
    _r("index_out_of_bounds", "runtime_crash", 1.0, "index out of bounds"),
    # triton
    _r("triton_compiler_error", "triton", 4.0, ("triton.compiler.errors", "triton.runtime.errors")),
    _r("triton_compilation_error", "triton", 2.5, "CompilationError", r"\bCompilationError\b"),
    _r("triton_out_of_resources", "triton", 4.0, ("OutOfResources", "out of resource: shared memory")),
    _r("ptxas_error", "triton", 4.0, ("PTXASError", "ptxas"), r"PTXASError|\bptxas\b.*(?:error|fatal)"),
    _r("triton_compilation_failed", "triton", 4.0, "Triton compilation failed"),
    _r("triton_error", "triton", 2.5, "Triton Error"),
    # Triton's launcher got a pointer it cannot read (a CPU tensor, or one of another device)
    _r("triton_pointer_argument", "triton", 4.0, "cannot be accessed from Triton"),
    # device-side asserts raised from generated Triton kernels (Triton prints "unknown" as the kernel name)
    _r("triton_device_assert", "triton", 5.0, ("unknown: block:", "unknown: global id:"),
       r"(?:^|[\s:\]])(?:unknown:\d+|\S*torchinductor_\S+\.py:\d+|\S*triton_helpers\.py:\d+): unknown: "
       r"(?:block: \[|global id: \[).{0,200}Assertion `"),
    _r("triton_device_assert_error", "triton", 4.0, "Triton Error [CUDA]: device-side assert"),
    # Inductor's generated bounds check (`0 <= tmp4 < 24`, its temporaries) failing on the device,
    # whatever location the assert reports (eager indexing asserts read `index >= -sizes[i]`)
    _r("inductor_device_index_assert", "triton", 5.0, "Assertion `index out of bounds: 0 <= tmp",
       r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `index out of bounds: 0 <= tmp\d+ < "),
    _r("triton_frame", "triton", 1.0, ("triton/compiler", "triton/runtime", "triton.compile("),
       r"triton/(?:compiler|runtime)/\w+\.py|triton\.compile\("),
    _r("triton_kernel_source", "triton", 1.0, "tl.",
       r"\btl\.(?:load|store|where|full|arange|program_id|device_assert|constexpr|dot|sum|reduce)\b"),
    _r("triton_heuristics_error_log", "triton", 2.0, "triton_heuristics.py",
       r"^E\d{4} .*triton_heuristics\.py:\d+\]"),
    # export
    _r("dynamo_user_error", "export", 3.5, "UserError", r"(?:exc\.)?UserError\b"),
    # dynamic shapes (under torch.compile or export: the compile mode decides, see classify())
    _r("constraint_violation", "dynamic_shapes", 3.5, ("ConstraintViolationError", "Constraints violated")),
    _r("specialized_to_constant", "dynamic_shapes", 3.0, "was inferred to be a constant",
       r"Not all values of .{0,300} are valid because .{0,300} was inferred to be a constant"),
    _r("data_dependent_guard", "dynamic_shapes", 3.0,
       ("GuardOnDataDependentSymNode", "Could not guard on data-dependent", "Could not extract specialized integer",
        "DataDependentOutputException", "PendingUnbackedSymbolNotFound")),
    _r("unbacked_symbol", "dynamic_shapes", 1.5, ("unbacked", "Unbacked"),
       r"create_unbacked_symint|[Pp]ending unbacked|unbacked sym(?:bol|int|float)s?\b"),
    _r("shape_env_guard_failed", "dynamic_shapes", 2.0, ("range_refined_to_singleton", "Source: shape_env",
                                                         "Create Function: SHAPE_ENV", "Failing guard allocated at")),
    # the symbolic-shapes log (TORCH_LOGS=dynamic): weak, it shows dynamic shapes at work, not a failure
    # `Created at:` logged by torch/_guards.py when building a guard raised (most often the shape-env
    # guard: a dynamic dim specialized); the stack below it is where the guard was made, not an error
    _r("guard_creation_failed", "dynamic_shapes", 1.5, "Created at:", r"_guards\.py:\d+\].*\bCreated at:"),
    _r("symbolic_shapes_log", "dynamic_shapes", 1.0, ("create_symbol ", "[guard added]", "set_replacement "),
       r"symbolic_shapes(?:\.py:\d+\]|: \[\w+\])"),
    _r("dynamic_logs_hint", "dynamic_shapes", 1.0, 'TORCH_LOGS="+dynamic"'),
    # an op that needs concrete sizes met a symbolic one
    _r("symbolic_sizes_call", "dynamic_shapes", 3.0, "on tensor with symbolic sizes",
       r"Cannot call \w+\(\) on tensor with symbolic sizes"),
    # c10's SymIntArrayRef asked for concrete sizes (an op or meta kernel without symbolic-size support)
    _r("symint_array_not_concrete", "dynamic_shapes", 3.0, "SymIntArrayRef expected to contain only concrete"),
    _r("export_call_failed", "export", 3.0, ("occurred when calling torch.export", "draft_export")),
    # an exported program (or its unflattened module) called with other inputs than it was exported with
    _r("exported_input_count", "export", 3.0, "Unexpected number of inputs",
       r"Unexpected number of inputs \(expected \d+, got \d+\)"),
    _r("during_export", "export", 2.0, ("during export", "Dynamic control flow is not supported",
                                        "Mutating module attribute")),
    # Dynamo's own objects: its variable trackers (TensorVariable, SymNodeVariable, ...) lack what its code asks of
    # them; Dynamo's bug, whatever the user's code did
    _r("dynamo_variable_attribute", "dynamo_internal", 4.0, "Variable' object has no attribute",
       r"'[A-Z]\w*Variable' object has no attribute"),
    # outside the seven categories, but recognised
    _r("fake_tensor_runtime_error", "unknown", 3.0, ("TorchRuntimeError", "Failed running call_")),
)

# anchor -> rules that use it (each anchor is searched once)
_ANCHOR_RULES: dict[str, tuple[Rule, ...]] = {}
for _rule in RULES:
    for _a in _rule.anchors:
        _ANCHOR_RULES[_a] = _ANCHOR_RULES.get(_a, ()) + (_rule,)

# Log lines that matter even far from the end of a long log (graph-break and recompile logs
# printed at start-up, a crash followed by more output). Before the tail window only these few
# anchors are searched; a line found this way is checked against every rule.
HEAD_ANCHORS: tuple[str, ...] = (
    "[__graph_breaks]", "raph break", "__recompiles", "recompile_limit", "cache_size_limit",
    "ccuracy failed", "fail_accuracy", "allclose", "Segmentation fault", "Fatal Python error",
    "CUDA error", "terminate called", "Triton compilation failed",
)


# --------------------------------------------------------------------------------------------
# Structural analysis of the parsed failure

_DYNAMIC_SHAPES_TYPES = ("ConstraintViolationError", "GuardOnDataDependentSymNode", "DataDependentOutputException",
                         "PendingUnbackedSymbolNotFound")
_TYPE_RULES: tuple[tuple[tuple[str, ...], str, float], ...] = (
    (("InternalTorchDynamoError",), "dynamo_internal", 6.0),
    (("FailOnRecompileLimitHit", "RecompileError", "CacheLimitExceeded"), "recompile", 6.0),
    (("AccuracyError",), "accuracy", 6.0),
    (("OutOfResources", "PTXASError", "CompilationError", "TritonError", "InterpreterError"), "triton", 6.0),
    (("BackendCompilerFailed", "InductorError"), "backend_compiler_failed", 5.0),
    (("LoweringException", "CppCompileError", "CUDACompileError", "InvalidCxxCompiler", "MissingOperatorWithoutDecomp",
      "MissingOperatorWithDecomp"), "backend_compiler_failed", 4.0),
    (("Unsupported", "UncapturedHigherOrderOpError"), "graph_break", 5.0),
    (_DYNAMIC_SHAPES_TYPES, "dynamic_shapes", 5.0),
    (("UserError", "UnsupportedAliasMutationException"), "export", 5.0),
    # torch/_export/verifier.py: an exported program breaks its own spec (state dict, signature, dialect)
    (("SpecViolationError",), "export", 5.0),
    (("TorchRuntimeError",), "unknown", 4.0),
    (("AcceleratorError", "OutOfMemoryError"), "runtime_crash", 5.0),
)
_GENERIC_TYPES = {"RuntimeError", "AssertionError", "IndexError", "KeyError", "TypeError", "AttributeError",
                  "ValueError", "NotImplementedError", "NameError", "UnboundLocalError", "ZeroDivisionError",
                  "StopIteration", "RecursionError", "SystemError", "OverflowError", "LookupError",
                  "ImportError", "ModuleNotFoundError", "OSError", "Exception"}

# PyTorch's own invariant broken (TORCH_INTERNAL_ASSERT), met while Dynamo ran an op on fake tensors
_INTERNAL_ASSERT_MSG = re.compile(r"INTERNAL ASSERT FAILED|please report a bug to PyTorch")
_RECOMPILE_MSG = re.compile(r"recompile[_ ]limit|cache_size_limit|[Rr]ecompil\w+ limit")
_NOT_CLOSE_MSG = re.compile(r"are not (?:close|equal)!|Mismatched elements")
_CUDA_MSG = re.compile(r"CUDA error|device-side assert|illegal memory access|misaligned address|"
                       r"CUBLAS_STATUS|cudaError|HIP error|Triton Error \[CUDA\]")
_EXPORT_MSG = re.compile(r"\bexport\b|Dynamic control flow is not supported")
_TRITON_MSG = re.compile(r"\btriton\b|\btl\.\w+|\bptxas\b", re.I)
_DATA_DEP_MSG = re.compile(r"data-dependent|GuardOnDataDependent|unbacked", re.I)
# a generic error about a symbolic size reaching code that wants a plain int (dynamic shapes)
# a generic error whose message names Inductor's own code generation (an assertion inside Inductor)
_INDUCTOR_MSG = re.compile(r"\b(?:Triton|Cpp|SIMD|Halide)Kernel\b|\bconfig\.(?:triton|cpp)\.\w|\btorch\._inductor\.\w")
# assert_size_stride's message (torch/_inductor, run by the generated code): `expected size 6==6, stride 4==1 at dim=0`
# an assert in Dynamo about one of its variable trackers: `PythonModuleVariable(...) is already tracked`,
# `<class 'torch._dynamo.variables.torch.TorchInGraphFunctionVariable'>`
_DYNAMO_VARIABLE_MSG = re.compile(r"torch\._dynamo\.variables\.|\b[A-Z]\w*Variable\(|\bVariable(?:Tracker|Builder)\b")
_SIZE_STRIDE_MSG = re.compile(r"^expected size \S+==\S+, stride \S+==\S+ at dim=\d+")
_SYMBOLIC_MSG = re.compile(r"\bSym(?:Int|Float|Bool)\b|symbolic (?:sizes|strides|shapes?)\b")
# a fake-tensor run's header alone (`Failed running call_function f(*(FakeTensor(..., size=(s0,)),), **{}):`)
# whose arguments carry symbolic sizes
_FAKE_RUN_HEADER_ONLY = re.compile(r"^Failed running call_\w+ .*size=\([^)]*\b[su]\d+.*\):$")
_STANCE_MSG = re.compile(r"Detected recompile when torch\.compile stance is")
_COMPARE_CODE = re.compile(r"allclose|assert_close|assert_equal|\bequal\(|isclose|\b(?:eager|compiled?|opt|ref|"
                           r"expected|actual)\w*\b.{0,80}(?:==|!=|<|>|-)|(?:==|!=|<|>|-).{0,80}\b(?:eager|compiled?|"
                           r"opt|ref|expected|actual)\w*\b|\bdiff\b|mismatch", re.I)


_CALLS_EXPORT = re.compile(r"\btorch\.(?:export\.(?:export|draft_export)|_dynamo\.export|_export\.\w+)\(")
_CALLS_BACKEND = re.compile(r"\b(?:compile_subgraph|compile_and_call_fx_graph|call_user_compiler|compile_fx)\(")


def _compared_outputs(msg: str, frames: list[Frame], kinds: list[str], code_above: str = "") -> bool:
    """An AssertionError raised in user code by a line (or with a message) that compares results.
    Without frames (an excerpt), the code line printed just above the exception line stands in."""
    if frames and kinds[-1] != "user":
        return False
    code = frames[-1].code or "" if frames else code_above
    return bool(_COMPARE_CODE.search(code) or _COMPARE_CODE.search(msg[:300]))

# Dynamo's own machinery (not tracing user code): an error raised here is an internal error.
_DYNAMO_BOOKKEEPING = ("resume_execution.py", "bytecode_analysis.py", "guards.py", "codegen.py",
                       "side_effects.py", "cache_size.py", "output_graph.py", "pgo.py", "source.py")
_SHAPE_GUARD_FUNCS = ("SHAPE_ENV", "_get_code_parts", "produce_guards", "produce_guards_verbose")
# The path every Dynamo compile goes through: a traceback cut inside these says little by itself.
_DYNAMO_OUTER = ("eval_frame.py", "convert_frame.py", "bytecode_transformation.py", "utils.py")
_DYNAMO_TRACING = ("symbolic_convert.py", "variables/", "variables\\")


# failure.BACKEND_CALLS, and the output graph's call that leads to them
_HANDOFF_CALLS = ("compile_and_call_fx_graph", *BACKEND_CALLS)
# the tracer's return: tracing is done and the graph goes to the backend (compile_subgraph)
_RETURN_OPS = ("RETURN_VALUE", "RETURN_CONST", "_return")


def _hands_to_backend(f: Frame, kind: str) -> bool:
    """A Dynamo frame at the hand-off of a traced graph to the backend: its line calls the backend,
    it is one of the hand-off functions, or it is the tracer returning (compiling the graph is next)."""
    func = f.function.rsplit(".", 1)[-1]
    return kind in ("trace", "dynamo_internal", "dynamo_outer") and (
        bool(_CALLS_BACKEND.search(f.code or "")) or func in _HANDOFF_CALLS or func in _RETURN_OPS)


_LIB_PATH = re.compile(r"site-packages|dist-packages|/lib/python|^<")


def _in_generated(path: str) -> bool:
    return bool(GENERATED_DIR.search(path)) or "<eval_with_key>" in path


def _in_inductor(path: str) -> bool:
    return "/_inductor/" in path or path.startswith("torch/_inductor")


def _in_autotune(path: str) -> bool:
    return _in_inductor(path) and path.endswith(("triton_heuristics.py", "autotune.py"))


def _inductor_runs(path: str, func: str) -> bool:
    """Inductor's code that runs the compiled graph (its output code, cudagraphs, its runtime wrappers)."""
    return path.endswith(("output_code.py", "cudagraph_trees.py", "cudagraph_utils.py")) \
        or "runtime_wrappers" in path or func in ("run", "__call__", "forward", "call", "_run")


def _functorch_runs(path: str, func: str) -> bool:
    # jit_compile_runtime_wrappers.py compiles (aot_dispatch_base ...); its forward/backward run
    at_runtime = "runtime_wrappers" in path and "jit_compile_runtime_wrappers" not in path
    return at_runtime or func in ("forward", "backward", "runtime_wrapper", "call_func_at_runtime_with_args")


def _in_dynamo(path: str) -> bool:
    return "/_dynamo/" in path


@dataclass(frozen=True)
class FrameKind:
    """A frame belongs to `kind` when `applies(path, func, code, in_torch)` holds: `path` with forward slashes,
    `func` the function's last dotted part (IPython names methods with their class), `code` its line or ""."""

    name: str
    kind: str
    applies: Callable[[str, str, str, bool], bool]
    example: Frame
    """a frame this row is the first to place (the parametrized test checks it)"""


def _fk(name: str, kind: str, applies: Callable[[str, str, str, bool], bool], file: str, function: str,
        code: str | None = None, in_torch: bool = True) -> FrameKind:
    return FrameKind(name, kind, applies, Frame(file=file, line=1, function=function, code=code, in_torch=in_torch))


_T = "/usr/lib/python3.11/site-packages/torch"
# tried in order, first match wins
FRAME_KINDS: tuple[FrameKind, ...] = (
    _fk("generated_module", "compile", lambda path, func, code, t: _in_generated(path) and func == "<module>",
        "/tmp/torchinductor_me/ab/cabc.py", "<module>", in_torch=False),
    _fk("generated", "generated", lambda path, func, code, t: _in_generated(path),
        "/tmp/torchinductor_me/ab/cabc.py", "call", in_torch=False),
    _fk("triton_package", "triton",
        lambda path, func, code, t: ("/triton/" in path or path.startswith("triton/")) and "/torch/" not in path,
        "/usr/lib/python3.11/site-packages/triton/compiler/compiler.py", "compile", in_torch=False),
    _fk("triton_kernel_wrap", "triton", lambda path, func, code, t: path.endswith("triton_kernel_wrap.py"),
        f"{_T}/_higher_order_ops/triton_kernel_wrap.py", "__call__"),
    # the line calls torch.export (or torch._dynamo.export): what follows is export
    _fk("calls_export", "export", lambda path, func, code, t: bool(_CALLS_EXPORT.search(code)),
        "/home/me/repro.py", "main", code="ep = torch.export.export(m, (x,))", in_torch=False),
    _fk("user", "user", lambda path, func, code, t: not t and not _LIB_PATH.search(path),
        "/home/me/repro.py", "forward", in_torch=False),
    _fk("lib", "lib", lambda path, func, code, t: not t,
        "/usr/lib/python3.11/site-packages/numpy/core/fromnumeric.py", "sum", in_torch=False),
    _fk("autotune_compile", "triton", lambda path, func, code, t: _in_autotune(path) and "compile" in func,
        f"{_T}/_inductor/runtime/triton_heuristics.py", "precompile"),
    _fk("autotune_run", "runtime", lambda path, func, code, t: _in_autotune(path),
        f"{_T}/_inductor/runtime/triton_heuristics.py", "run"),
    # async_compile.triton, loading or precompiling a Triton kernel
    _fk("inductor_triton_kernel", "triton", lambda path, func, code, t: _in_inductor(path) and (
            func == "triton" or "triton_kernel" in func or ".precompile(" in code),
        f"{_T}/_inductor/async_compile.py", "triton"),
    # GraphLowering: its run / run_node interpret the FX graph to lower it
    _fk("graph_lowering", "compile", lambda path, func, code, t: path.endswith("/_inductor/graph.py"),
        f"{_T}/_inductor/graph.py", "run"),
    _fk("inductor_runs", "runtime", lambda path, func, code, t: _in_inductor(path) and _inductor_runs(path, func),
        f"{_T}/_inductor/output_code.py", "__call__"),
    _fk("inductor_runtime", "runtime", lambda path, func, code, t: _in_inductor(path)
        and "/_inductor/runtime/" in path and "compile" not in func and "load" not in func,
        f"{_T}/_inductor/runtime/static_cuda_launcher.py", "launch"),
    _fk("inductor", "compile", lambda path, func, code, t: _in_inductor(path),
        f"{_T}/_inductor/compile_fx.py", "compile_fx"),
    _fk("functorch_runs", "runtime", lambda path, func, code, t: "/_functorch/" in path
        and _functorch_runs(path, func),
        f"{_T}/_functorch/_aot_autograd/runtime_wrappers.py", "inner_fn"),
    _fk("functorch", "compile", lambda path, func, code, t: "/_functorch/" in path,
        f"{_T}/_functorch/_aot_autograd/jit_compile_runtime_wrappers.py", "aot_dispatch_base"),
    _fk("dynamo_backend", "compile", lambda path, func, code, t: _in_dynamo(path) and (
            func in ("call_user_compiler", "_call_user_compiler") or "/repro/after_dynamo" in path
            or "/backends/" in path),
        f"{_T}/_dynamo/output_graph.py", "OutputGraph.call_user_compiler"),
    # debug_wrapper calls the compiler; deferred_for_real_inputs / inner_debug_fn run the result
    _fk("after_aot_compile", "compile", lambda path, func, code, t: _in_dynamo(path)
        and "/repro/after_aot" in path and func == "debug_wrapper",
        f"{_T}/_dynamo/repro/after_aot.py", "debug_wrapper"),
    _fk("after_aot_run", "runtime", lambda path, func, code, t: _in_dynamo(path) and "/repro/after_aot" in path,
        f"{_T}/_dynamo/repro/after_aot.py", "deferred_for_real_inputs"),
    _fk("dynamo_exc", "trace", lambda path, func, code, t: _in_dynamo(path) and path.endswith("exc.py"),
        f"{_T}/_dynamo/exc.py", "unimplemented"),
    _fk("dynamo_tracing", "trace", lambda path, func, code, t: _in_dynamo(path)
        and any(k in path for k in _DYNAMO_TRACING),
        f"{_T}/_dynamo/symbolic_convert.py", "CALL_FUNCTION"),
    # building the shape-env guards: produce_guards raises dynamic-shape errors here
    _fk("shape_guards", "shapes", lambda path, func, code, t: _in_dynamo(path) and path.endswith("guards.py")
        and func in _SHAPE_GUARD_FUNCS,
        f"{_T}/_dynamo/guards.py", "SHAPE_ENV"),
    _fk("dynamo_bookkeeping", "dynamo_internal", lambda path, func, code, t: _in_dynamo(path)
        and path.endswith(_DYNAMO_BOOKKEEPING),
        f"{_T}/_dynamo/output_graph.py", "compile_subgraph"),
    _fk("dynamo_outer", "dynamo_outer", lambda path, func, code, t: _in_dynamo(path)
        and path.endswith(_DYNAMO_OUTER),
        f"{_T}/_dynamo/convert_frame.py", "_compile"),
    _fk("dynamo", "torch", lambda path, func, code, t: _in_dynamo(path),
        f"{_T}/_dynamo/polyfills/__init__.py", "index"),
    _fk("export", "export", lambda path, func, code, t: "/export/" in path or "/_export/" in path,
        f"{_T}/export/_trace.py", "_export"),
    _fk("shapes", "shapes",
        lambda path, func, code, t: path.endswith("symbolic_shapes.py") or "/_subclasses/" in path,
        f"{_T}/fx/experimental/symbolic_shapes.py", "evaluate_expr"),
    _fk("torch_assert", "generated", lambda path, func, code, t: path.endswith("torch/__init__.py")
        and func == "_assert",
        f"{_T}/__init__.py", "_assert"),
    _fk("graph_module_call", "generated", lambda path, func, code, t: "/fx/" in path
        and func in ("call_wrapped", "__call__") and "graph_module" in path,
        f"{_T}/fx/graph_module.py", "call_wrapped"),
    _fk("torch", "torch", lambda path, func, code, t: True, f"{_T}/nn/modules/module.py", "_call_impl"),
)


def _frame_kind(f: Frame) -> str:
    """Which part of the stack a frame belongs to: generated, compile, runtime, trace, export,
    triton, dynamo_internal, dynamo_outer, shapes, torch, user, lib (the first row of FRAME_KINDS that applies)."""
    return _frame_kind_row(f).kind


def _frame_kind_row(f: Frame) -> FrameKind:
    """The first row of FRAME_KINDS that applies to the frame (the last row applies to any)."""
    path, func, code = f.file.replace("\\", "/"), f.function.rsplit(".", 1)[-1], f.code or ""
    return next(row for row in FRAME_KINDS if row.applies(path, func, code, f.in_torch))


@dataclass
class _Hit:
    pos: int  # offset of the line start in the text (-1: unknown)
    line_no: int  # 0-based, -1 if unknown yet
    text: str
    rule: str
    category: str
    weight: float


def _line_above(text: str, line: str) -> str:
    """The line printed just above the last occurrence of `line` (empty if none)."""
    end = text.rfind("\n" + line) if line else -1
    if end <= 0:
        return ""
    return text[text.rfind("\n", 0, end) + 1:end].strip()


@dataclass(frozen=True)
class MessageRule:
    """A final exception that no type rule placed, placed by its message: its short type is among `types`
    (None: any type) and `pattern` occurs in its message (in the first `head` characters, when set)."""

    rule: str
    category: Category
    weight: float
    pattern: re.Pattern[str]
    types: frozenset[str] | None
    example: str
    """the exception line of a failure the rule places (the parametrized test classifies it)"""
    head: int | None = None


@dataclass(frozen=True)
class Refinement:
    """An exception a type rule placed in `placed`, moved to `category` when its short type is `type` (None: any)
    and `pattern` occurs in its message; the first row that matches applies."""

    rule: str
    placed: Category
    type: str | None
    pattern: re.Pattern[str]
    category: Category
    weight: float
    example: str
    """the exception line of a failure the row moves (the parametrized test classifies it)"""


REFINEMENTS: tuple[Refinement, ...] = (
    Refinement("exception:internal_assert_in_fake_run", "unknown", "TorchRuntimeError", _INTERNAL_ASSERT_MSG,
               "dynamo_internal", 5.0, "torch._dynamo.exc.TorchRuntimeError: Failed running call_function "
               "aten.add(*(FakeTensor(..., size=(3,)),), **{}): INTERNAL ASSERT FAILED at aten/src/ATen/core.cpp"),
    Refinement("exception:symbolic_in_fake_run", "unknown", "TorchRuntimeError", _SYMBOLIC_MSG, "dynamic_shapes", 7.0,
               "torch._dynamo.exc.TorchRuntimeError: Failed running call_function f(*(FakeTensor(..., size=(s0,)),)"
               ", **{}): Cannot call sizes() on tensor with symbolic sizes/strides"),
    # the reason is cut off: only the op and its fake arguments are left, and their sizes are symbolic
    Refinement("exception:fake_run_with_symbolic_sizes", "unknown", "TorchRuntimeError", _FAKE_RUN_HEADER_ONLY,
               "dynamic_shapes", 6.5, "torch._dynamo.exc.TorchRuntimeError: Failed running call_function "
               "<built-in function mul>(*(FakeTensor(..., size=(s0, 4)), 2), **{}):"),
    Refinement("exception:recompile_limit", "graph_break", None, _RECOMPILE_MSG, "recompile", 6.0,
               "torch._dynamo.exc.Unsupported: hit config.recompile_limit (8)"),
)

CUDA_RULE = "exception:cuda_error"  # refined below when Triton's frames or name show
_ASSERTION = frozenset({"AssertionError"})
_GENERIC = frozenset(_GENERIC_TYPES)
# tried in order, first match wins
MESSAGE_RULES: tuple[MessageRule, ...] = (
    # the generated code checked an output's sizes and strides (assert_size_stride) as it ran
    MessageRule("exception:size_stride_assert", "runtime_crash", 5.0, _SIZE_STRIDE_MSG, _ASSERTION,
                "AssertionError: expected size 6==6, stride 4==1 at dim=0"),
    # Dynamo asserted something about its own variable trackers while tracing
    MessageRule("exception:dynamo_variable_assert", "dynamo_internal", 5.0, _DYNAMO_VARIABLE_MSG, _ASSERTION,
                "AssertionError: PythonModuleVariable(<module 'math'>) is already tracked", head=400),
    MessageRule("exception:not_close", "accuracy", 6.0, _NOT_CLOSE_MSG, frozenset({"AssertionError", "Exception"}),
                "AssertionError: Tensor-likes are not close!"),
    MessageRule(CUDA_RULE, "runtime_crash", 5.0, _CUDA_MSG, None,
                "RuntimeError: CUDA error: an illegal memory access was encountered"),
    MessageRule("exception:data_dependent", "dynamic_shapes", 3.0, _DATA_DEP_MSG, _GENERIC,
                "RuntimeError: Could not guard on data-dependent expression Eq(u0, 1)"),
    MessageRule("exception:symbolic_value", "dynamic_shapes", 3.0, _SYMBOLIC_MSG, _GENERIC,
                "TypeError: an integer is required, got SymInt", head=400),
    MessageRule("exception:inductor_internal", "backend_compiler_failed", 2.5, _INDUCTOR_MSG, _GENERIC,
                "AssertionError: CppKernel has no store for buf0", head=400),
    MessageRule("exception:fail_on_recompile", "recompile", 6.0, _STANCE_MSG, None,
                "RuntimeError: Detected recompile when torch.compile stance is 'fail_on_recompile'"),
)


def _structural(p: ParsedFailure, hits: list[_Hit], text: str = "") -> dict:
    """Evidence from the final exception, its chain and frames. Returns facts used later."""
    facts: dict = {"final_category": None, "wrapped_triton": False, "frame_phase": None}
    final_blk, frames = _final_frames(p, text)
    kinds = [_frame_kind(f) for f in frames]
    _signal_evidence(p, hits, facts)
    fe = p.final_exc
    if fe is not None:
        cat, weight, rule, deciding = _exception_category(p, fe, frames, kinds, text, hits, facts)
        if cat is not None:
            _add(hits, cat, weight, rule, fe.line_no, fe.line)
            if deciding >= 0 and final_blk is not None and deciding < len(final_blk.frame_lines):
                ln, raw = final_blk.frame_lines[deciding]
                _add(hits, cat, 1.0, rule, ln, raw)
            facts["final_category"] = facts["final_category"] or cat
    elif frames:
        cat, weight, rule, deciding = _from_frames(kinds, frames, "", strong=False)
        if cat is not None:
            if final_blk is not None and 0 <= deciding < len(final_blk.frame_lines):
                ln, raw = final_blk.frame_lines[deciding]
                _add(hits, cat, weight, rule, ln, raw)
            else:
                _add(hits, cat, weight, rule)
            facts["final_category"] = facts["final_category"] or cat
    facts["frame_phase"] = _phase_from_kinds(kinds)
    return facts


def _add(hits: list[_Hit], cat: str, w: float, rule: str, line_no: int = -1, text: str = "") -> None:
    hits.append(_Hit(-1, line_no, text, rule, cat, w))


def _final_frames(p: ParsedFailure, text: str) -> tuple[_Block | None, list[Frame]]:
    """The last block with an exception or frames, and the frames that tell where the failure happened."""
    final_blk = next((b for b in reversed(p.blocks) if b.exc is not None or b.frames), None)
    frames = final_blk.frames if final_blk else []
    if final_blk is not None and final_blk.exc is None and final_blk.frame_lines \
            and _line_above(text, final_blk.frame_lines[0][1]).endswith("Created at:"):
        frames = []  # a guard's creation stack (logged when building the guard failed), not an error's
    return final_blk, frames


def _signal_evidence(p: ParsedFailure, hits: list[_Hit], facts: dict) -> None:
    if p.signal_name:
        ln, txt = p.fatal_line if p.fatal_line else (-1, "")
        if p.signal_name in EXTERNAL_SIGNALS:  # killed from outside: weak evidence of a crash
            _add(hits, "runtime_crash", 2.0, f"signal:{p.signal_name}", ln, txt)
        else:
            _add(hits, "runtime_crash", 6.0, f"signal:{p.signal_name}", ln, txt)
            facts["final_category"] = "runtime_crash"


def _exception_category(p: ParsedFailure, fe: _Exc, frames: list[Frame], kinds: list[str], text: str,
                        hits: list[_Hit], facts: dict) -> tuple[str | None, float, str, int]:
    """The category the final exception gives (by its types, its message, then its frames), its weight and rule,
    and the index of the deciding frame (-1: none). Lesser evidence met on the way goes to `hits`."""
    types = [fe.type or ""] + p.wrapped_types
    short = [t.rsplit(".", 1)[-1] for t in types if t]
    msg = fe.message or ""
    final_short = short[0] if short else ""
    cat, weight, rule = _by_type(short)
    if _wrapped_triton(types, short, kinds, msg) and cat in (None, "backend_compiler_failed", "triton"):
        facts["wrapped_triton"] = True
        if cat == "backend_compiler_failed":
            _add(hits, "backend_compiler_failed", 3.0, rule, fe.line_no, fe.line)
        cat, weight, rule = "triton", 6.0, "exception:triton"
    refined = next((r for r in REFINEMENTS if r.placed == cat and r.type in (None, final_short)
                    and r.pattern.search(msg.strip())), None)
    if refined is not None:
        cat, weight, rule = refined.category, refined.weight, refined.rule
    placed = None if cat is not None else next(
        (r for r in MESSAGE_RULES if (r.types is None or final_short in r.types)
         and r.pattern.search(msg if r.head is None else msg[:r.head])), None)
    if placed is not None:
        cat, weight, rule = placed.category, placed.weight, placed.rule
        if placed.rule == CUDA_RULE:
            cat, rule = _cuda_error(fe, kinds, placed.category, rule, hits)
    if cat in ("backend_compiler_failed", "dynamo_internal") and any(s in _DYNAMIC_SHAPES_TYPES for s in short[1:]):
        # a dynamic-shapes error wrapped by the backend or by Dynamo
        _add(hits, cat, 2.0, rule, fe.line_no, fe.line)
        cat, weight, rule = "dynamic_shapes", 5.5, "exception:wrapped_dynamic_shapes"
    if cat is not None:
        return cat, weight, rule, -1
    if final_short == "AssertionError" and _compared_outputs(
            msg, frames, kinds, "" if frames else _line_above(text, fe.line)):
        # a bare assert in user code right after comparing outputs: weak alone (the compile-off run decides)
        return "accuracy", 1.5, "exception:user_assert_compare", -1
    if compiled_callable_frame(p) is not None:
        # raised in a function of the script that the compiled code called (what the script's backend
        # returned): the compiled code's run, not Dynamo's, whose frames are only its callers
        return "runtime_crash", 4.0, "frames:compiled_callable", -1
    # a generic exception (or one we do not know): the frames say where it was raised
    known = final_short in _GENERIC_TYPES or final_short.endswith(("Error", "Exception"))
    return _from_frames(kinds, frames, msg, strong=known)


def _by_type(short: list[str]) -> tuple[str | None, float, str]:
    """The first type rule naming one of the exception's types (outermost first), its weight and rule."""
    for names, c, w in _TYPE_RULES:
        hit = next((s for s in short if s in names), None)
        if hit is not None:
            # the outermost recognised type decides, except that a wrapped Triton error wins
            return c, w, f"exception:{hit}"
    return None, 0.0, ""


def _wrapped_triton(types: list[str], short: list[str], kinds: list[str], msg: str) -> bool:
    """A Triton error wrapped by the backend."""
    final_short = short[0] if short else ""
    return any(s in ("OutOfResources", "PTXASError", "CompilationError") for s in short[1:]) \
        or any(t.startswith("triton.") for t in types) \
        or (final_short in ("BackendCompilerFailed", "InductorError") and
            ("triton" in kinds or bool(_TRITON_MSG.search(msg[:400]))))


def _cuda_error(fe: _Exc, kinds: list[str], cat: str, rule: str, hits: list[_Hit]) -> tuple[str, str]:
    """A CUDA error placed by its message: an assert raised from a generated Triton kernel is a Triton kernel
    error; Triton's frames or name beside any other are evidence of triton."""
    msg = fe.message or ""
    if "device-side assert" in msg and ("Triton Error" in msg or "triton" in kinds):
        _add(hits, "runtime_crash", 2.0, rule, fe.line_no, fe.line)
        return "triton", "exception:triton_device_assert"
    if "triton" in kinds or "Triton" in msg:
        _add(hits, "triton", 2.0, "frames:triton", fe.line_no, fe.line)
    return cat, rule


def _from_frames(kinds: list[str], frames: list[Frame], msg: str, *,
                 strong: bool) -> tuple[str | None, float, str, int]:
    """Category suggested by the innermost frames of a generic exception (or of a traceback cut
    before its exception line), with the index of the deciding frame (-1: none)."""
    w = 4.0 if strong else 2.5
    for i in range(len(frames) - 1, -1, -1):  # innermost informative frame first
        kind = kinds[i]
        if kind in ("user", "lib", "torch", "shapes"):
            if kind == "shapes" and not strong:
                return "dynamic_shapes", 1.5, "frames:symbolic_shapes", i
            continue
        if not strong and _hands_to_backend(frames[i], kind):
            # a traceback cut where Dynamo hands the graph to the backend: the failure is past tracing
            return "backend_compiler_failed", 2.0, "frames:backend_call", i
        if kind in ("generated", "runtime"):
            return "runtime_crash", w, "frames:compiled_code", i
        if kind == "triton":
            return "triton", w, "frames:triton", i
        if kind == "compile":
            return "backend_compiler_failed", w - 0.5, "frames:backend_compile", i
        if kind == "export":
            return "export", w - 0.5, "frames:export", i
        if kind == "dynamo_outer":
            # a generic exception raised on Dynamo's compile path is an internal error; frames
            # alone that end here are just a traceback cut short
            if strong:
                return "dynamo_internal", w - 1.0, "frames:dynamo_internal", i
            continue
        if kind in ("dynamo_internal", "trace"):
            if _EXPORT_MSG.search(msg):
                return "export", w - 1.0, "frames:dynamo_export", i
            if kind == "dynamo_internal":
                return "dynamo_internal", w, "frames:dynamo_internal", i
            if strong:
                return "dynamo_internal", w - 0.5, "frames:dynamo_trace", i
            return "graph_break", 1.5, "frames:dynamo_trace", i
    return None, 0.0, "", -1


_COMPARES = re.compile(r"\b(?:assert_close|assertEqual|allclose|assert_allclose|isclose)\(")
_RECOMPILE_MACHINERY = ("fail_callback", "exceeds_recompile_limit", "exceeds_cache_size_limit")


def _fallback_frame_kind(f: Frame) -> str:
    """The part of the stack a frame of an unplaced text belongs to. Beyond _frame_kind: a Dynamo
    frame whose line hands the graph to the backend counts as the backend's (as in _from_frames);
    the comparison of results (torch.testing, a line calling assert_close / allclose) is "compare";
    a Triton kernel's generated launcher is "triton"; torch._dynamo.export's inner function is "export";
    Dynamo's recompile bookkeeping (the fail_on_recompile stance, the recompile limit) is "recompile"."""
    kind = _frame_kind(f)
    path = f.file.replace("\\", "/")
    if _hands_to_backend(f, kind):
        return "compile"
    if path == "<string>" and f.function == "launcher":
        return "triton"  # the launcher Inductor generates for a Triton kernel
    if f.in_torch and "export.<locals>." in f.function:
        return "export"  # torch._dynamo.export's inner function
    if path.endswith("testing/_comparison.py") or (kind in ("user", "lib", "torch") and _COMPARES.search(f.code or "")):
        return "compare"
    if f.in_torch and "/_dynamo/" in path and f.function.rsplit(".", 1)[-1] in _RECOMPILE_MACHINERY:
        return "recompile"
    return kind


def _phase_from_kinds(kinds: list[str]) -> str | None:
    """The phase of the innermost frame that tells one; Dynamo's entry points (eval_frame's compile_wrapper
    and _fn) run both the compiling and the compiled code, so they tell none."""
    for k in reversed(kinds):
        if k in ("generated", "runtime"):
            return "runtime"
        if k in ("compile", "triton"):
            return "backend_compile"
        if k in ("trace", "dynamo_internal", "export"):
            return "trace"
    return None


# --------------------------------------------------------------------------------------------
# Line scanning


def _line_at(text: str, pos: int) -> tuple[int, str]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    if end < 0:
        end = len(text)
    if end - start > 2000:  # a huge line: keep a window around the hit
        start = max(start, pos - 400)
        end = min(end, pos + 400)
    line = text[start:end]
    if line.endswith("\r"):
        line = line[:-1]
    return start, line


def _scan_lines(text: str, hits: list[_Hit]) -> None:
    n = len(text)
    tail_start = max(0, n - TAIL)
    if tail_start:
        nl = text.find("\n", tail_start, tail_start + 4096)
        if nl >= 0:
            tail_start = nl + 1
    seen: set[tuple[int, str]] = set()
    line_cache: dict[int, tuple[int, str]] = {}

    def line_of(pos: int) -> tuple[int, str]:
        got = line_cache.get(pos)
        if got is None:
            got = _line_at(text, pos)
            line_cache[pos] = got
        return got

    def examine(start: int, line: str, rules: tuple[Rule, ...]) -> None:
        for rule in rules:
            key = (start, rule.name)
            if key in seen:
                continue
            seen.add(key)
            if rule.pattern is not None and not rule.pattern.search(line):
                continue
            hits.append(_Hit(start, -1, line, rule.name, rule.category, rule.weight))

    for anchor, rules in _ANCHOR_RULES.items():
        end = n
        for _ in range(MAX_HITS_PER_ANCHOR):
            pos = text.rfind(anchor, tail_start, end)
            if pos < 0:
                break
            start, line = line_of(pos)
            examine(start, line, rules)
            end = start if start < pos else pos
    if tail_start > 0:
        for anchor in HEAD_ANCHORS:
            end = tail_start
            for _ in range(2):
                pos = text.rfind(anchor, 0, end)
                if pos < 0:
                    break
                start, line = line_of(pos)
                examine(start, line, tuple(r for a, rs in _ANCHOR_RULES.items() if a in line for r in rs))
                end = start if start < pos else pos


_PRINT_RULES = ("eager_output_print", "compiled_output_print", "uncompiled_output_print",
                "with_compile_output_print")
# a printed value's label; `without compile` (and `w/o`, `no`) names the eager side
_LABELLED_VALUE = re.compile(
    r"(?i)\b((?:without|w/o|no) (?:torch\.)?compiled?|eager|compiled?|inductor|optimized)(?:_\w+)?\b"
    r"[^:=\n]{0,30}?[:=]\s*")
_EAGER_LABEL = re.compile(r"(?i)eager|without|w/o|no\b")


def _printed_values_agree(hits: list[_Hit]) -> bool:
    """The script printed its eager and compiled results and they are the same (`eager: tensor([])`,
    `compiled: tensor([])`, on one line or two): no evidence of a wrong result."""
    values: dict[str, set[str]] = {"eager": set(), "compiled": set()}
    for line in {h.text for h in hits if h.rule in _PRINT_RULES}:
        labels = list(_LABELLED_VALUE.finditer(line))
        for m, nxt in zip(labels, [*labels[1:], None], strict=True):
            value = line[m.end():nxt.start() if nxt else len(line)].strip().rstrip(",;")
            if not value or value.count("(") != value.count(")") or value.count("[") != value.count("]"):
                return False  # a value printed over several lines: not comparable from one line
            values["eager" if _EAGER_LABEL.match(m.group(1)) else "compiled"].add(value)
    return bool(values["eager"]) and values["eager"] == values["compiled"]


# `has_nan=True`, `isinf: False`, `all_finite = True`: a boolean check printed about a result
_PRINTED_FLAG = re.compile(r"(?i)\b((?:has|is|any|all)?_?(?:nan|inf|finite)\w*)\s*[=:]\s*(True|False)\b")
_EAGER_WORD = re.compile(r"(?i)\beager\b")
_COMPILED_WORD = re.compile(r"(?i)\b(?:compiled?|inductor|optimized)\b")


def _printed_flags_disagree(text: str, hits: list[_Hit]) -> None:
    """The script printed the same NaN/Inf check for its eager and its compiled result and the
    answers differ (`eager: has_nan=False`, `compile: has_nan=True`): a wrong compiled result."""
    lo = max(0, len(text) - TAIL)
    seen: dict[str, dict[str, str]] = {"eager": {}, "compiled": {}}
    compiled_lines: list[tuple[int, str, dict[str, str]]] = []
    for m in re.finditer(r"(?m)^.*\b(?:True|False)\b.*$", text[lo:]):
        line = m.group(0)
        flags = {f.group(1).lower(): f.group(2) for f in _PRINTED_FLAG.finditer(line)}
        if not flags:
            continue
        eager, compiled = bool(_EAGER_WORD.search(line)), bool(_COMPILED_WORD.search(line))
        if eager == compiled:
            continue  # neither side named, or both on one line
        side = "eager" if eager else "compiled"
        seen[side].update(flags)
        if compiled:
            compiled_lines.append((lo + m.start(), line, flags))
    for pos, line, flags in compiled_lines:
        if any(seen["eager"].get(k, v) != v for k, v in flags.items()):
            hits.append(_Hit(pos, -1, line, "printed_check_differs", "accuracy", 3.0))
            return


# --------------------------------------------------------------------------------------------
# Compile mode


_STRICT_FUNCS = ("_strict_export", "_export_to_torch_ir")
_NON_STRICT_FUNCS = ("_non_strict_export",)


def _compile_mode(text: str, p: ParsedFailure) -> str | None:
    funcs = set()
    files = []
    for b in p.blocks:
        for f in b.frames + b.user_code_frames:
            funcs.add(f.function)
            files.append(f.file.replace("\\", "/"))
    if funcs.intersection(_STRICT_FUNCS) or any(f.endswith("_dynamo/functional_export.py") for f in files):
        return "strict_export"
    if funcs.intersection(_NON_STRICT_FUNCS) or any(f.endswith("_export/non_strict_utils.py") for f in files):
        return "non_strict_export"
    lo = max(0, len(text) - TAIL)
    if text.rfind("_non_strict_export", lo) >= 0 or text.rfind("non_strict_utils.py", lo) >= 0:
        return "non_strict_export"
    if text.rfind("_strict_export", lo) >= 0 or text.rfind("_export_to_torch_ir", lo) >= 0:
        return "strict_export"
    if any(f.endswith(("_dynamo/eval_frame.py", "_dynamo/convert_frame.py")) for f in files):
        return "torch.compile"
    for marker in ("torch._dynamo", "torch/_dynamo", "torch\\_dynamo", "TORCHDYNAMO_", "torch.compile",
                   "torch._inductor", "torch/_inductor", "torch\\_inductor"):
        if text.rfind(marker, lo) >= 0:
            return "torch.compile"
    return None


_EXPORT_FUNCS = frozenset({"export", "_export", "draft_export", "_export_for_training", "export_for_training",
                           "_strict_export", "_non_strict_export", "_export_to_torch_ir", "_export_to_aten_ir"})
# torch.export called in a script (or in pasted code): torch.export.export(...), export(...) imported from
# torch.export, torch._dynamo.export, draft_export
_EXPORT_IN_SCRIPT = re.compile(r"\btorch\.export\.(?:export|draft_export|_trace)\b|\btorch\._dynamo\.export\("
                               r"|\bfrom torch\.export import\b[^\n]*\b(?:export|draft_export)\b|\btorch\._export\b")
_COMPILE_IN_SCRIPT = re.compile(r"\btorch\.compile\b|@compile\b|\bcompile\(|\btorch\._dynamo\.optimize\(")


def _export_in_frames(p: ParsedFailure) -> Frame | None:
    """The innermost frame that shows the failure happened inside torch.export."""
    for b in reversed(p.blocks):
        for f in reversed(b.frames):
            path = f.file.replace("\\", "/")
            if f.in_torch and ("/export/" in path or "/_export/" in path or path.endswith("functional_export.py")
                               or ("/_dynamo/eval_frame.py" in path and f.function in _EXPORT_FUNCS)):
                return f
    return None


def _uses_export(p: ParsedFailure, mode: str | None, script_text: str | None) -> bool:
    """Export needs evidence: export frames in the traceback, or torch.export called by the script."""
    if mode in ("strict_export", "non_strict_export") or _export_in_frames(p) is not None:
        return True
    return bool(script_text and _EXPORT_IN_SCRIPT.search(script_text))


def _export_mode_evidence(p: ParsedFailure, mode: str, hits: list[_Hit]) -> None:
    """The frame line that shows the failure happened inside torch.export."""
    wanted = _STRICT_FUNCS if mode == "strict_export" else _NON_STRICT_FUNCS
    for b in reversed(p.blocks):
        for f, (ln, raw) in zip(reversed(b.frames), reversed(b.frame_lines), strict=False):
            if f.function in wanted or f.file.replace("\\", "/").endswith(
                    ("_dynamo/functional_export.py", "_export/non_strict_utils.py")):
                hits.append(_Hit(-1, ln, raw, f"frames:{mode}", "export", 3.0))
                return


# --------------------------------------------------------------------------------------------
# Decision


_DEFAULT_PHASE = {
    "graph_break": "trace", "recompile": "trace", "dynamo_internal": "trace", "export": "trace",
    "dynamic_shapes": "trace",
    "backend_compiler_failed": "backend_compile", "triton": "backend_compile",
    "runtime_crash": "runtime", "accuracy": "runtime",
}


def classify(text: str, exit_code: int | None = None, signal_name: str | None = None,
             script_text: str | None = None,
             text_model: TextModel | Literal["default"] | None = "default") -> Classification:
    """Classify error output (stdout and stderr of a failed run, or an excerpt of it).

    `exit_code` and `signal_name` are how the process ended, when known (-11 as subprocess
    reports a signal, or 139 as a shell does, name SIGSEGV). `script_text`, the repro's source
    when known, tells torch.compile from torch.export (the traceback frames tell it otherwise).
    `text_model` makes the last guess for text nothing else places (`learned`): the model fitted on
    the packaged corpus by default, another one (a benchmark leaving a batch out), or None for none.
    Never raises on any text.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = str(text)
    index = LineIndex(text)
    parsed = parse(text, exit_code, signal_name, index)
    hits: list[_Hit] = []
    facts = _structural(parsed, hits, text)
    _scan_lines(text, hits)
    _printed_flags_disagree(text, hits)
    if _printed_values_agree(hits):
        hits = [h for h in hits if h.rule not in _PRINT_RULES]
    mode, uses_export = _mode_of(text, parsed, script_text, hits)
    record = record_from_parsed(parsed, exit_code, last_line(text))

    # scores: a rule counts fully once, then with diminishing returns
    scores: dict[str, float] = {c: 0.0 for c in CATEGORIES}
    per_rule: dict[str, int] = {}
    for h in hits:
        k = per_rule.get(h.rule, 0)
        per_rule[h.rule] = k + 1
        scores[h.category] += h.weight * (1.0 if k == 0 else 0.25 if k < 4 else 0.0)

    ranked = sorted((c for c in CATEGORIES if scores[c] > 0), key=lambda c: -scores[c])
    forced_secondary: list[str] = []
    # The fallback reads text that shows no exception: an exception no rule knows (a ValueError raised in
    # user code, called from a test's assertEqual) is not guessed at, nor is the output of a run that passed
    # (a warning naming torch.onnx's exporter is no export failure).
    guess = fallback.guess(text, _fallback_frame_kind) \
        if not ranked and parsed.final_exc is None and exit_code != 0 else None
    learned_guess = None
    if guess is None and not ranked and exit_code != 0 and text_model is not None and (
            parsed.final_exc is None or _raised_in_torch(parsed)):
        learned_guess = _learned_guess(text, text_model)
    if guess is not None:
        # no rule placed the text: the fallback's best guess, with a confidence below any rule's
        category = guess.category
        hits.extend(_Hit(-1, ln, line, rule, category, 1.0) for ln, line, rule in guess.evidence)
    elif learned_guess is not None:
        # nor did the fallback: the words of labelled failures decide, with the lowest confidence of all
        category = learned_guess.category
        hits.extend(_Hit(-1, ln, line, "fallback:learned", category, 1.0) for ln, line in learned_guess.evidence)
    elif not ranked:
        category = "unknown"
    else:
        category = _ranked_category(ranked, scores, facts, parsed, uses_export, forced_secondary)
    top = scores[category] if ranked else 0.0
    secondary = [c for c in forced_secondary if c != category]
    for c in ranked:
        if c != category and c not in secondary and c != "unknown" and scores[c] >= max(2.0, 0.3 * top):
            secondary.append(c)

    if guess is not None:
        confidence = guess.confidence
    elif learned_guess is not None:
        confidence = learned_guess.confidence
    else:
        confidence = _confidence(scores, category) if ranked else 0.3
    confidence = round(max(0.05, min(0.99, confidence)), 3)

    phase = _phase_of(category, facts["frame_phase"], guessed=learned_guess is not None)
    evidence = _select_evidence(text, index, hits, category, secondary)
    return Classification(category=category, secondary=secondary, confidence=confidence, evidence=evidence,
                          compile_mode=mode, phase=phase, failure=record)


def _confidence(scores: dict[str, float], category: str) -> float:
    """Grows with the evidence for the winner, shrinks with the evidence for the runner-up."""
    top = scores[category]
    runner = max((scores[c] for c in CATEGORIES if c != category), default=0.0)
    return (1.0 - math.exp(-top / 3.0)) * (top / (top + runner)) if top > 0 else 0.3


def _mode_of(text: str, parsed: ParsedFailure, script_text: str | None, hits: list[_Hit]
             ) -> tuple[str | None, bool]:
    """torch.compile or torch.export (strict or not), from the text and the script; and whether the
    failure happened inside torch.export."""
    mode = _compile_mode(text, parsed)
    if mode in ("strict_export", "non_strict_export"):
        _export_mode_evidence(parsed, mode, hits)
    if script_text and mode == "torch.compile" and _EXPORT_IN_SCRIPT.search(script_text) \
            and not _COMPILE_IN_SCRIPT.search(script_text):
        mode = None  # Dynamo's names in the text come from export's own tracing: the script says which it is
    uses_export = _uses_export(parsed, mode, script_text)
    if script_text and mode is None:
        if _EXPORT_IN_SCRIPT.search(script_text):
            mode = "strict_export" if re.search(r"strict\s*=\s*True", script_text) else "non_strict_export"
        elif _COMPILE_IN_SCRIPT.search(script_text):
            mode = "torch.compile"
    return mode, uses_export


def _ranked_category(ranked: Sequence[str], scores: dict[str, float], facts: dict, parsed: ParsedFailure,
                     uses_export: bool, forced_secondary: list[str]) -> str:
    """The category the rules' scores give, after the structural overrides (appending to forced_secondary)."""
    category = ranked[0]
    final_cat = facts["final_category"]
    # the final exception decides unless line evidence is much stronger
    if final_cat and final_cat != category and scores[final_cat] * 1.5 >= scores[category]:
        category = final_cat
    if category == "accuracy" and (raised_in(parsed) or ("", None))[0] == "compiled_code":
        # the exception came from compiled or generated code (an FX graph's torch._assert, Inductor's
        # output code), not from the program comparing results
        category = next((c for c in ranked if c != "accuracy"), "runtime_crash")
    if facts["wrapped_triton"] or (category == "backend_compiler_failed" and scores["triton"] >= 4.0
                                   and final_cat in (None, "triton")):
        category = "triton"
        forced_secondary.append("backend_compiler_failed")
    if category == "export" and not uses_export and scores["dynamic_shapes"] > 0:
        # dynamic-shape errors raised as UserError outside torch.export
        forced_secondary.append("export")
        category = "dynamic_shapes"
    if uses_export and category not in ("export", "accuracy", "runtime_crash") and (
            parsed.final_exc is not None or scores["export"] > 0 or category == "dynamic_shapes"):
        # the failure happened inside torch.export: the underlying evidence supports it
        forced_secondary.append(category)
        scores["export"] += scores[category]
        category = "export"
    return category


def _phase_of(category: str, frame_phase: str | None, guessed: bool) -> str | None:
    phase = _DEFAULT_PHASE.get(category)
    if category == "unknown" or guessed:
        phase = frame_phase  # a guessed category says nothing of the phase: only frames do
    elif category == "runtime_crash" and frame_phase == "backend_compile":
        phase = "backend_compile"
    elif category == "triton" and frame_phase == "runtime":
        phase = "runtime"
    return phase


def _raised_in_torch(parsed: ParsedFailure) -> bool:
    """The final exception was raised in torch's code or in code it generated. One raised in the user's code (a
    ValueError of their own) is not guessed at, nor is a lone exception line, which does not say whose code raised
    it: guessing at lone lines gained three held-out answers of 340, but four user-agent journals read the
    guessed category (`dynamic_shapes` for a dtype mismatch in aten::mm) as an answer and were sent the wrong
    way. The reproduction's compile-off run tells whose it is."""
    block = next((b for b in reversed(parsed.blocks) if b.exc is not None), None)
    if block is None or not block.frames:
        return False
    innermost = block.frames[-1]
    return innermost.in_torch or innermost.in_generated_code()


def _learned_guess(text: str, text_model: TextModel | Literal["default"]) -> LearnedGuess | None:
    if text_model == "default":
        try:
            text_model = learned.default_model()
        except (ImportError, FileNotFoundError):  # an installation without the corpus or scikit-learn
            return None
    return text_model.guess(text)


def _shown_code(text: str, h: _Hit) -> bool:
    """The hit's line is source code a traceback shows under a frame line."""
    if h.pos <= 0 or not h.text[:1].isspace():
        return False
    previous = text[text.rfind("\n", 0, h.pos - 1) + 1:h.pos - 1]
    return match_frame(strip_prefix(previous)) is not None


def _select_evidence(text: str, index: LineIndex, hits: list[_Hit], category: str,
                     secondary: list[str]) -> list[EvidenceLine]:
    order = {category: 0}
    for i, c in enumerate(secondary):
        order[c] = i + 1
    usable = [h for h in hits if h.category in order and (h.line_no >= 0 or h.pos >= 0)]
    for h in sorted(usable, key=lambda h: h.pos):
        if h.line_no < 0:
            h.line_no = index.line_of(h.pos)
    # the winner's evidence first, strongest first, later lines first among equals
    usable.sort(key=lambda h: (order[h.category], -h.weight, -h.line_no))
    chosen: list[_Hit] = []
    lines_seen: set[int] = set()
    per_cat: dict[str, int] = {}
    per_rule: dict[str, int] = {}
    for h in usable:
        if h.line_no in lines_seen or not strip_prefix(h.text).strip(" ^~\t"):
            continue
        if per_cat.get(h.category, 0) and _shown_code(text, h):
            continue  # a source line a traceback shows (`raise InternalTorchDynamoError(`) beside a better line
        limit = MAX_EVIDENCE if h.category == category else 2
        if per_cat.get(h.category, 0) >= limit or per_rule.get(h.rule, 0) >= 2:
            continue
        per_cat[h.category] = per_cat.get(h.category, 0) + 1
        per_rule[h.rule] = per_rule.get(h.rule, 0) + 1
        lines_seen.add(h.line_no)
        chosen.append(h)
        if len(chosen) >= MAX_EVIDENCE:
            break
    return [EvidenceLine(line_no=h.line_no + 1, text=h.text[:MAX_EVIDENCE_CHARS], rule=h.rule) for h in chosen]
