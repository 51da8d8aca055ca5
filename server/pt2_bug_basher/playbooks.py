"""What the method prescribes per failure category: one table, the source of every other copy.

`torch_logs.PRESETS` / `PRESET_ENV` / `PRESET_INDUCTOR_CONFIG`, classify_error's guide and
diagnostic, triage's next steps, the frontmatter of `prompts/categories/*.md` and the category
tables of `skill/SKILL.md` all come from PLAYBOOKS (`python -m pt2_bug_basher.docsync` rewrites
the files; `--check` fails when they are stale). The prose of each playbook stays in its prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.evidence import LocalizeRecord
from pt2_bug_basher.domain.names import USER_ERROR, ToolName


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class MinifyPlan(_Frozen):
    mode: Literal["fx", "source", "auto"] = Field(description="fx: PyTorch's minifier on the failing graph; source: "
                                                              "shrink the script; auto: decided by localize")
    after: Literal["aot", "dynamo"] | None = Field(None, description="TORCHDYNAMO_REPRO_AFTER for fx")
    level: int | None = Field(None, description="TORCHDYNAMO_REPRO_LEVEL for fx")
    note: str = ""


class Diagnostic(_Frozen):
    """The first diagnostic call; case_id and script are added when it is written out."""

    tool: ToolName
    arguments: dict[str, str | int | dict[str, str]] = Field(default_factory=dict)


class Playbook(_Frozen):
    category: str
    telltale: str = Field(description="the text that identifies the category (Markdown)")
    logs: str | None = Field(description="the TORCH_LOGS spec of the category's preset "
                                          "(run_with_logs(logs=<category>)); None: no preset (not a compiler failure)")
    env: dict[str, str] = Field(default_factory=dict, description="what the preset sets besides TORCH_LOGS")
    inductor_config: dict[str, bool | int | str] = Field(default_factory=dict,
                                                         description="Inductor config the preset applies")
    minify: MinifyPlan
    read_first: list[str] = Field(description="TORCH_LOGS artifacts of the preset, then TORCH_COMPILE_DEBUG files "
                                              "(step 8), in the order to read them")
    source_files: list[str]
    config_knobs: list[str]
    test_files: list[str] = Field(description="topical test files, most likely first")
    diagnostic: Diagnostic


def _logs(category: str) -> Diagnostic:
    return Diagnostic(tool=ToolName.run_with_logs, arguments={"logs": category})


_LOCALIZE = Diagnostic(tool=ToolName.localize)
_VERBOSE = {"TORCHDYNAMO_VERBOSE": "1"}  # Dynamo's internal stack instead of the shortened user one

PLAYBOOKS: dict[str, Playbook] = {p.category: p for p in (
    Playbook(
        category="graph_break",
        telltale='`torch._dynamo.exc.Unsupported` (with `Explanation:` / `Hint:` / `gb` link), "Graph break in '
                 'user code", "Graph Break Reason"',
        logs="graph_breaks",  # where and why Dynamo splits the program, with the user frame
        minify=MinifyPlan(mode="source", note="keep `fullgraph=True` so the break raises"),
        read_first=["graph_breaks"],
        source_files=["torch/_dynamo/symbolic_convert.py", "torch/_dynamo/variables/", "torch/_dynamo/trace_rules.py",
                      "torch/_dynamo/polyfills/", "torch/_dynamo/graph_break_registry.json", "torch/_dynamo/exc.py"],
        config_knobs=["torch._dynamo.config.capture_scalar_outputs",
                      "torch._dynamo.config.capture_dynamic_output_shape_ops", "torch._dynamo.config.verbose",
                      "torch.compile(fullgraph=True)", "torch._dynamo.explain(fn)(*args)"],
        test_files=["test/dynamo/test_repros.py", "test/dynamo/test_functions.py",
                    "test/dynamo/test_graph_break_messages.py"],
        diagnostic=_logs("graph_break"),
    ),
    Playbook(
        category="recompile",
        telltale="`torch._dynamo hit config.recompile_limit (N)`, \"Dynamo recompile limit exceeded\", "
                 "\"recompile_limit reached\" / \"cache_size_limit reached\" (older), `FailOnRecompileLimitHit`, "
                 "`RecompileError` (only with `error_on_recompile`)",
        logs="recompiles,recompiles_verbose,guards",  # every failing guard per recompile, and each entry's guards
        minify=MinifyPlan(mode="source", note="with `error_on_recompile = True` in the script"),
        read_first=["recompiles_verbose", "guards"],
        source_files=["torch/_dynamo/guards.py", "torch/_dynamo/variables/builder.py",
                      "torch/fx/experimental/symbolic_shapes.py", "torch/_dynamo/convert_frame.py"],
        config_knobs=["torch._dynamo.config.recompile_limit", "torch._dynamo.config.accumulated_recompile_limit",
                      "torch._dynamo.config.fail_on_recompile_limit_hit", "torch._dynamo.config.error_on_recompile",
                      "torch._dynamo.config.automatic_dynamic_shapes",
                      "torch._dynamo.config.assume_static_by_default", "torch._dynamo.mark_dynamic(t, dim)"],
        test_files=["test/dynamo/test_recompiles.py", "test/dynamo/test_guard_manager.py",
                    "test/dynamo/test_unspec.py"],
        diagnostic=_logs("recompile"),
    ),
    Playbook(
        category="dynamo_internal",
        telltale="`torch._dynamo.exc.InternalTorchDynamoError`, `AssertionError` or `AttributeError` raised from "
                 "inside `torch/_dynamo/`",
        logs="+dynamo",  # every traced instruction, variable and guard up to the crash
        env=_VERBOSE,
        minify=MinifyPlan(mode="source", note="the failure is inside the tracer: no graph reaches a backend"),
        read_first=["dynamo", "torchdynamo/debug.log"],
        source_files=["torch/_dynamo/symbolic_convert.py", "torch/_dynamo/variables/", "torch/_dynamo/side_effects.py",
                      "torch/_dynamo/output_graph.py", "torch/_dynamo/convert_frame.py", "torch/_dynamo/exc.py"],
        config_knobs=["TORCHDYNAMO_VERBOSE=1", "torch._dynamo.config.verbose",
                      "torch._dynamo.config.suppress_errors (hides, never fixes)"],
        test_files=["test/dynamo/test_repros.py", "test/dynamo/test_functions.py", "test/dynamo/test_exceptions.py",
                    "test/dynamo/test_higher_order_ops.py"],
        diagnostic=_logs("dynamo_internal"),
    ),
    Playbook(
        category="backend_compiler_failed",
        telltale="`torch._dynamo.exc.BackendCompilerFailed: backend='...' raised:` (other backends); for Inductor, "
                 "2.13 prints `torch._inductor.exc.InductorError: <Inner>: ...` e.g. `LoweringException`, "
                 "`CppCompileError`, and never the BackendCompilerFailed name (`InductorError` subclasses it)",
        # the graph AOTAutograd hands over, the graph Inductor lowers, the code it generated, and Inductor's
        # INFO lines saying which graph (forward, backward, inference) was compiling when it failed
        logs="aot_graphs,post_grad_graphs,output_code,inductor",
        # compile in-process (real tracebacks, no worker pool) and show Dynamo's internal stack
        env={"TORCHINDUCTOR_COMPILE_THREADS": "1", **_VERBOSE},
        minify=MinifyPlan(mode="fx", after="aot", level=2, note="after `dynamo` if `aot_eager` also fails"),
        read_first=["post_grad_graphs", "output_code", "aot_graphs", "fx_graph_transformed.py", "ir_pre_fusion.txt"],
        source_files=["torch/_inductor/compile_fx.py", "torch/_inductor/graph.py", "torch/_inductor/lowering.py",
                      "torch/_inductor/ir.py", "torch/_inductor/decomposition.py", "torch/_inductor/codecache.py",
                      "torch/_inductor/codegen/cpp.py", "torch/_functorch/_aot_autograd/"],
        config_knobs=["TORCHDYNAMO_REPRO_AFTER=aot", "TORCHDYNAMO_REPRO_LEVEL=2", "TORCHINDUCTOR_COMPILE_THREADS=1",
                      "TORCHINDUCTOR_FORCE_DISABLE_CACHES=1", "torch._inductor.config.fallback_random"],
        test_files=["test/inductor/test_torchinductor.py", "test/inductor/test_cpu_repro.py",
                    "test/inductor/test_cuda_repro.py", "test/functorch/test_aotdispatch.py",
                    "test/dynamo/test_aot_autograd.py", "test/inductor/test_unbacked_symints.py"],
        diagnostic=_LOCALIZE,
    ),
    Playbook(
        category="triton",
        telltale="`triton.compiler.errors.CompilationError`, `OutOfResources` (\"out of resource: shared memory\"), "
                 "`PTXASError`, Triton `NameError`/type errors in generated kernels",
        logs="output_code,schedule",  # the kernels and the fusion decisions that produced them
        # the error raised in the main process, from a fresh compile
        env={"TORCHINDUCTOR_COMPILE_THREADS": "1", "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"},
        minify=MinifyPlan(mode="fx", after="aot", level=2, note="user kernels: source mode, keeping the kernel"),
        read_first=["output_code", "schedule", "ir_post_fusion.txt", "output_code.py"],
        source_files=["torch/_inductor/codegen/triton.py", "torch/_inductor/runtime/triton_heuristics.py",
                      "torch/_inductor/select_algorithm.py", "torch/_inductor/async_compile.py",
                      "torch/_higher_order_ops/triton_kernel_wrap.py"],
        config_knobs=["TORCHINDUCTOR_COMPILE_THREADS=1", "torch._inductor.config.triton.debug_sync_kernel",
                      "torch._inductor.config.max_autotune", "TORCHINDUCTOR_FORCE_DISABLE_CACHES=1"],
        test_files=["test/inductor/test_triton_kernels.py", "test/inductor/test_cuda_repro.py",
                    "test/inductor/test_codegen_triton.py"],
        diagnostic=_logs("triton"),
    ),
    Playbook(
        category="accuracy",
        telltale='"Accuracy failed", `AccuracyError` / "Bad accuracy detected", "Tensor-likes are not close!", '
                 "NaN/Inf only in compiled output",
        logs="aot_graphs,output_code",  # the AOT graph and the generated code, to compare against eager
        env={"TORCHINDUCTOR_NAN_ASSERTS": "1"},  # stop at the first kernel that produces NaN/Inf
        minify=MinifyPlan(mode="fx", after="aot", level=4, note="after `dynamo` if `aot_eager` also diverges"),
        read_first=["aot_graphs", "output_code", "fx_graph_readable.py", "fx_graph_transformed.py", "output_code.py"],
        source_files=["torch/_inductor/decomposition.py", "torch/_decomp/decompositions.py",
                      "torch/_inductor/lowering.py", "torch/_inductor/fx_passes/", "torch/_inductor/codegen/",
                      "torch/_dynamo/repro/after_aot.py"],
        config_knobs=["TORCHDYNAMO_REPRO_AFTER=aot", "TORCHDYNAMO_REPRO_LEVEL=4",
                      "torch._dynamo.config.repro_tolerance", "torch._inductor.config.fallback_random",
                      "torch._inductor.config.emulate_precision_casts", "TORCHINDUCTOR_NAN_ASSERTS=1"],
        test_files=["test/inductor/test_torchinductor.py", "test/inductor/test_cpu_repro.py",
                    "test/inductor/test_cuda_repro.py"],
        diagnostic=_LOCALIZE,
    ),
    Playbook(
        category="runtime_crash",
        telltale='SIGSEGV / SIGABRT / "Segmentation fault", "illegal memory access", "device-side assert '
                 'triggered", generated-code frames in the traceback',
        # the code that ran when it crashed, and the graph (with sizes and strides) it was generated from
        logs="post_grad_graphs,output_code",
        # asynchronous CUDA errors surface at the kernel that caused them, every tensor is its own allocation
        # (so out-of-bounds accesses fault), NaN/Inf are caught where they appear
        env={"CUDA_LAUNCH_BLOCKING": "1", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "TORCHINDUCTOR_NAN_ASSERTS": "1"},
        inductor_config={"triton.debug_sync_kernel": True},  # synchronise after every kernel: which one faulted
        minify=MinifyPlan(mode="fx", after="aot", level=3,
                          note="level 3 writes the launcher before compiling, so a killed process still leaves a "
                               "repro; 2 when the crash is a Python exception"),
        read_first=["output_code", "post_grad_graphs", "output_code.py", "ir_post_fusion.txt"],
        source_files=["torch/_inductor/output_code.py", "torch/_inductor/codegen/wrapper.py",
                      "torch/_inductor/codegen/cpp.py", "torch/_inductor/codegen/triton.py", "torch/_inductor/ir.py",
                      "torch/_inductor/cudagraph_trees.py"],
        config_knobs=["CUDA_LAUNCH_BLOCKING=1", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", "TORCHINDUCTOR_NAN_ASSERTS=1",
                      "torch._inductor.config.size_asserts", "torch._inductor.config.triton.debug_sync_kernel",
                      "torch._inductor.config.triton.debug_sync_graph"],
        test_files=["test/inductor/test_cuda_repro.py", "test/inductor/test_cpu_repro.py",
                    "test/inductor/test_torchinductor.py", "test/inductor/test_cudagraph_trees.py"],
        diagnostic=_logs("runtime_crash"),
    ),
    Playbook(
        category="dynamic_shapes",
        telltale="`ConstraintViolationError` / \"Constraints violated\" or \"Not all values of ... are valid "
                 "because ... was inferred to be a constant\" (a `mark_dynamic` dimension specialised), "
                 "`GuardOnDataDependentSymNode` / \"Could not guard on data-dependent expression\", "
                 "`PendingUnbackedSymbolNotFound` / unbacked symbols, under `torch.compile` (no torch.export in the "
                 "frames or the script)",
        # symbolic shapes at DEBUG: every symbol created, guard added and specialisation with its user frame;
        # the guards each compiled entry ended up with
        logs="+dynamic,guards",
        minify=MinifyPlan(mode="source", note="keep the `mark_dynamic` / `dynamic=True` that makes the shape symbolic"),
        read_first=["dynamic", "guards"],
        source_files=["torch/fx/experimental/symbolic_shapes.py", "torch/_dynamo/variables/builder.py",
                      "torch/_dynamo/guards.py", "torch/_subclasses/fake_impls.py", "torch/_refs/__init__.py",
                      "torch/_inductor/sizevars.py"],
        config_knobs=["torch._dynamo.mark_dynamic(t, dim) / torch._dynamo.maybe_mark_dynamic(t, dim)",
                      "torch._dynamo.config.assume_static_by_default", "torch._dynamo.config.automatic_dynamic_shapes",
                      "torch._dynamo.config.capture_scalar_outputs",
                      "torch._dynamo.config.capture_dynamic_output_shape_ops",
                      "torch.fx.experimental._config.backed_size_oblivious", "torch._check / torch._check_is_size",
                      'TORCHDYNAMO_EXTENDED_DEBUG_GUARD_ADDED="<guard>"',
                      'TORCHDYNAMO_EXTENDED_DEBUG_CREATE_SYMBOL="<symbol>"', "TORCHDYNAMO_EXTENDED_DEBUG_CPP=1"],
        test_files=["test/dynamo/test_dynamic_shapes.py", "test/test_dynamic_shapes.py",
                    "test/inductor/test_unbacked_symints.py", "test/dynamo/test_unspec.py"],
        diagnostic=_logs("dynamic_shapes"),
    ),
    Playbook(
        category="export",
        telltale="`torch._dynamo.exc.UserError`, `ConstraintViolationError` / \"Constraints violated\", "
                 "`GuardOnDataDependentSymNode` / \"Could not guard on data-dependent expression\", with "
                 "`torch.export` in the frames (`torch/export/`, `torch/_export/`) or in the script",
        # export (and Dynamo, for strict export) at DEBUG; `dynamic` after it keeps symbolic shapes at INFO:
        # symbols created, guards added, specialisations, without the DEBUG flood
        logs="+export,dynamic",
        minify=MinifyPlan(mode="source", note="the FX minifier does not cover export"),
        read_first=["dynamic", "export"],
        source_files=["torch/export/_trace.py", "torch/_export/non_strict_utils.py", "torch/export/dynamic_shapes.py",
                      "torch/fx/experimental/symbolic_shapes.py", "torch/_dynamo/eval_frame.py"],
        config_knobs=["torch.export.export(..., strict=True|False)", "torch.export.Dim / dynamic_shapes",
                      "torch._check / torch._check_is_size", "TORCH_LOGS=+export,dynamic"],
        test_files=["test/export/test_export.py", "test/export/test_draft_export.py",
                    "test/functorch/test_control_flow.py", "test/export/test_serialize.py"],
        diagnostic=_logs("export"),
    ),
    Playbook(
        category=USER_ERROR,
        telltale="not a compiler bug: the script fails the same way with `TORCHDYNAMO_DISABLE=1`, or the "
                 "exception is raised in the script's own backend (never read from text alone)",
        logs=None,  # no compiler logs: the failure is the script's
        minify=MinifyPlan(mode="source", note="only to show the script's own bug: nothing to report upstream"),
        read_first=[],
        source_files=[],
        config_knobs=["TORCHDYNAMO_DISABLE=1", 'torch.compiler.set_stance("force_eager")'],
        test_files=[],
        # the eager run shows the script's own error without the compiler in the way
        diagnostic=Diagnostic(tool=ToolName.run_with_logs,
                              arguments={"repeat": 1, "env": {"TORCHDYNAMO_DISABLE": "1"}}),
    ),
    Playbook(
        category="unknown",
        telltale="nothing above matched: a plain `RuntimeError` or `TypeError`, a hang, a wrong shape, or output cut "
                 "before the telltale line",
        logs="dynamo,aot,inductor,graph_breaks,recompiles",  # each layer at INFO: which one was working
        env=_VERBOSE,
        minify=MinifyPlan(mode="auto", level=2,
                          note="fx after the layer localize finds, else source"),
        read_first=["graph_breaks", "recompiles", "dynamo", "aot", "inductor"],
        source_files=["torch/_dynamo/eval_frame.py", "torch/_dynamo/convert_frame.py", "torch/_inductor/compile_fx.py"],
        config_knobs=["TORCHDYNAMO_VERBOSE=1", "TORCH_LOGS=+dynamo", "TORCH_TRACE=dir + tlparse"],
        test_files=["test/dynamo/test_repros.py", "test/inductor/test_torchinductor.py",
                    "test/functorch/test_aotdispatch.py"],
        diagnostic=_LOCALIZE,
    ),
)}


# --------------------------------------------------------------------------------------------
# Where localize puts the failure: the playbook, the source to read and the test files follow it

# Presets named after a layer, not a category: what run_with_logs(logs=<name>) collects for a failure there.
# torch 2.13 registers no artifact for AOTAutograd's generated runtime wrappers; aot_graphs prints the graph with
# the fw_metadata the wrappers act on (mutated inputs, aliased outputs), +aot the aliasing and mutation decisions.
LAYER_PRESETS: dict[str, str] = {
    "aot_autograd": "aot_graphs,aot_joint_graph,+aot",
    # a wrong result with backend="eager": the graph Dynamo captured, the bytecode it runs around it (outputs
    # rebuilt, the caller's objects written back) and the mutations and guards that bytecode acts on
    "dynamo_wrong_result": "graph_code,bytecode,side_effects,guards,recompiles",
}

DYNAMIC_SHAPES = "dynamic shapes"
DYNAMO_GUARDS = "Dynamo guards"
EXPORT = "export"  # torch.export reaches the compiler itself: the backend ladder cannot swap it


class LayerFiles(_Frozen):
    playbook: str = Field(description="the playbook for a failure in this layer when the category's playbook is "
                                      "written for another")
    logs: str = Field(description="the step-6 preset (a key of torch_logs.PRESETS) for a failure in this layer when "
                                  "the category's playbook does not cover it")
    source_files: list[str]
    test_files: list[str]


LAYERS: dict[str, LayerFiles] = {
    "Dynamo": LayerFiles(
        playbook="dynamo_internal",
        logs="dynamo_internal",
        # tracing, and the guards that decide whether a compiled graph is reused
        source_files=["torch/_dynamo/symbolic_convert.py", "torch/_dynamo/variables/", "torch/_dynamo/guards.py",
                      "torch/_dynamo/output_graph.py", "torch/_dynamo/convert_frame.py",
                      "torch/_dynamo/side_effects.py"],
        test_files=["test/dynamo/test_repros.py", "test/dynamo/test_functions.py",
                    "test/dynamo/test_guard_manager.py", "test/dynamo/test_recompiles.py"],
    ),
    # Dynamo, where the guards run flagged an entry reusable for inputs it was not traced for (a stale graph):
    # the guards and the recompiles that did not happen are the evidence, as for a recompile
    DYNAMO_GUARDS: LayerFiles(
        playbook="recompile",
        logs="recompile",
        source_files=["torch/_dynamo/variables/builder.py", "torch/_dynamo/guards.py",
                      "torch/_dynamo/convert_frame.py", "torch/_dynamo/symbolic_convert.py"],
        test_files=["test/dynamo/test_recompiles.py", "test/dynamo/test_repros.py",
                    "test/dynamo/test_guard_manager.py", "test/dynamo/test_functions.py"],
    ),
    "AOTAutograd": LayerFiles(
        playbook="backend_compiler_failed",
        logs="aot_autograd",
        source_files=["torch/_functorch/_aot_autograd/", "torch/_functorch/aot_autograd.py",
                      "torch/_functorch/partitioners.py", "torch/_subclasses/functional_tensor.py"],
        test_files=["test/functorch/test_aotdispatch.py", "test/dynamo/test_aot_autograd.py"],
    ),
    "decompositions": LayerFiles(
        playbook="backend_compiler_failed",
        logs="backend_compiler_failed",
        source_files=["torch/_decomp/decompositions.py", "torch/_inductor/decomposition.py",
                      "torch/_refs/__init__.py", "torch/_functorch/partitioners.py"],
        test_files=["test/test_decomp.py", "test/inductor/test_torchinductor.py",
                    "test/functorch/test_aotdispatch.py"],
    ),
    "Inductor": LayerFiles(
        playbook="backend_compiler_failed",
        logs="backend_compiler_failed",
        source_files=["torch/_inductor/compile_fx.py", "torch/_inductor/graph.py", "torch/_inductor/lowering.py",
                      "torch/_inductor/ir.py", "torch/_inductor/scheduler.py", "torch/_inductor/codegen/"],
        test_files=["test/inductor/test_torchinductor.py", "test/inductor/test_cpu_repro.py",
                    "test/inductor/test_cuda_repro.py"],
    ),
    EXPORT: LayerFiles(
        playbook="export",
        logs="export",
        # tracing, the decompositions run_decompositions applies, and the module ep.module() builds around the graph
        source_files=["torch/export/_trace.py", "torch/export/exported_program.py", "torch/export/_unlift.py",
                      "torch/export/graph_signature.py", "torch/_export/non_strict_utils.py"],
        test_files=["test/export/test_export.py", "test/export/test_unflatten.py"],
    ),
    DYNAMIC_SHAPES: LayerFiles(
        playbook="dynamic_shapes",
        logs="dynamic_shapes",
        source_files=list(PLAYBOOKS["dynamic_shapes"].source_files),
        test_files=list(PLAYBOOKS["dynamic_shapes"].test_files),
    ),
}

# The layers each category's playbook is written for, the one its files are about first. A layer
# outside them means the category's files point the wrong way (an accuracy failure localize puts
# in Dynamo, a stale graph reused after a missing guard, is a Dynamo bug, not an Inductor one).
COVERS: dict[str, tuple[str, ...]] = {
    "graph_break": ("Dynamo",),
    "recompile": ("Dynamo", DYNAMO_GUARDS, DYNAMIC_SHAPES),
    "dynamo_internal": ("Dynamo",),
    "backend_compiler_failed": ("Inductor", "AOTAutograd", "decompositions"),
    "triton": ("Inductor",),
    "accuracy": ("Inductor", "decompositions"),
    "runtime_crash": ("Inductor",),
    "dynamic_shapes": (DYNAMIC_SHAPES, "Dynamo"),
    "export": (EXPORT, "Dynamo", DYNAMIC_SHAPES),
}


def layer_of(record: LocalizeRecord | None) -> str | None:
    """The layer localize found: 'dynamic shapes' when the failing rung passes with dynamic=False and fails
    with dynamic=True; 'Dynamo guards' when the layer is Dynamo and its guards run flagged a guard shape that
    lets a stale entry be reused; None when localize did not run or found no layer."""
    if record is None or not record.layer or record.layer not in LAYERS:
        return None
    outcomes = {(row.backend, row.dynamic): row.outcome for row in record.table}
    first = record.first_failing
    static, dynamic = outcomes.get((first or "", "False")), outcomes.get((first or "", "True"))
    if static is not None and static != "same failure" and dynamic == "same failure":
        return DYNAMIC_SHAPES
    if record.layer == "Dynamo" and record.guard_flags:
        return DYNAMO_GUARDS
    return record.layer


class Focus(_Frozen):
    playbook: str
    source_files: list[str]
    test_files: list[str]


# A category in a layer its playbook is not written for, where the layer's own playbook (written for its crashes)
# does not fit either: the category's playbook with the layer's files, and this step-6 preset (a LAYER_PRESETS key).
IN_LAYER: dict[tuple[str, str], str] = {
    # a wrong value Dynamo produced: no traced instruction fails (+dynamo is for that); the graph it captured, the
    # bytecode around it and the mutations it replays show where the value went wrong
    ("accuracy", "Dynamo"): "dynamo_wrong_result",
}


def focus(category: str | None, layer: str | None) -> Focus:
    """The playbook and the files for a category, once localize's layer is known: a blind spot's where the bug
    lies outside the graph; for an IN_LAYER pair, the category's own with the layer's files; the category's own
    when it is written for that layer first; the layer's first when it covers the layer too; else only the
    layer's."""
    spot = blind_spot(category, layer)
    if spot is not None:
        return Focus(playbook=spot.playbook, source_files=list(spot.source_files), test_files=list(spot.test_files))
    own = PLAYBOOKS.get(category or "") or PLAYBOOKS["unknown"]
    mine = Focus(playbook=own.category, source_files=list(own.source_files), test_files=list(own.test_files))
    area = LAYERS.get(layer or "")
    if area is not None and (own.category, layer) in IN_LAYER:
        return Focus(playbook=own.category, source_files=list(area.source_files), test_files=list(area.test_files))
    if area is None or own.category == USER_ERROR:
        return mine
    covers = COVERS.get(own.category, ())
    if covers[:1] == (layer,):
        return mine
    if layer in covers:
        return Focus(playbook=own.category, source_files=_unique(area.source_files + own.source_files),
                     test_files=_unique(area.test_files + own.test_files))
    return Focus(playbook=area.playbook, source_files=list(area.source_files), test_files=list(area.test_files))


def log_preset(category: str | None, layer: str | None = None) -> str:
    """The logs preset for the case's step 6, per (category, layer): IN_LAYER's first, then the category's own
    when its playbook covers localize's layer, else the layer's (the recompile preset when the guards run flagged
    a stale entry, the AOT graphs for AOTAutograd); the general one when neither has a preset."""
    if (category or "", layer or "") in IN_LAYER:
        return IN_LAYER[(category or "", layer or "")]
    own = PLAYBOOKS.get(category or "")
    area = LAYERS.get(layer or "")
    if area is not None and own is not None and own.category != USER_ERROR \
            and layer not in COVERS.get(own.category, ()):
        return area.logs
    return own.category if own is not None and own.logs else "unknown"


class BlindSpot(_Frozen):
    """A (category, layer) whose bug lies outside the compiled graph: its graph's outputs match eager, so neither
    the FX minifier nor the kernels in the debug artifacts show it."""

    note: str
    playbook: str = Field(description="the playbook that fits: the category's own, not the layer's crash playbook")
    minify: MinifyPlan
    config_knobs: list[str]
    source_files: list[str]
    test_files: list[str]


BLIND_SPOTS: dict[tuple[str, str], BlindSpot] = {
    # a wrong result localize puts in AOTAutograd (aot_eager fails, eager passes): the graph is right, and what
    # runs around it (input mutations written back, outputs regenerated as aliases, the epilogues) is not
    ("accuracy", "AOTAutograd"): BlindSpot(
        note=("localize put a wrong result in AOTAutograd: the compiled graph computes the right values and the "
              "fault is in what runs around it (input mutations copied back, outputs regenerated as views or "
              "aliases of inputs, the runtime wrappers). The FX minifier compares graph outputs, so after aot it "
              "cannot see the bug and after dynamo only when the wrong value is a graph output; the kernels in the "
              "debug artifacts match eager. Reduce the script itself, and read the runtime wrappers and the "
              "metadata they act on (run_with_logs' aot_metadata, from the aot_graphs log: mutated inputs, outputs "
              "regenerated as views)."),
        playbook="accuracy",  # a wrong value, whose diagnostic is localize; no artifact shows it
        minify=MinifyPlan(mode="source", note="the FX minifier cannot see a bug outside the graph"),
        config_knobs=['torch.compile(backend="aot_eager") (AOTAutograd without Inductor: the same wrappers)',
                      "TORCH_LOGS=aot_graphs (fw_metadata: input_info mutations, output_info aliasing)"],
        source_files=["torch/_functorch/_aot_autograd/runtime_wrappers.py",
                      "torch/_functorch/_aot_autograd/input_output_analysis.py",
                      "torch/_functorch/_aot_autograd/collect_metadata_analysis.py",
                      "torch/_functorch/_aot_autograd/functional_utils.py",
                      "torch/_functorch/_aot_autograd/schemas.py"],
        test_files=["test/functorch/test_aotdispatch.py", "test/dynamo/test_aot_autograd.py"],
    ),
}


def blind_spot(category: str | None, layer: str | None) -> BlindSpot | None:
    return BLIND_SPOTS.get((category or "", layer or ""))


def minify_plan(category: str | None, layer: str | None) -> MinifyPlan:
    """The minifier for a category (its level follows the failure kind: 4 compares values, 2 checks for the
    error), after the layer localize found: dynamo when the graph AOTAutograd produces is not at fault, aot after
    it; source where the FX minifier cannot see the bug."""
    spot = blind_spot(category, layer)
    if spot is not None:
        return spot.minify
    plan = (PLAYBOOKS.get(category or "") or PLAYBOOKS["unknown"]).minify
    if plan.mode != "fx" or (layer or "") not in _AFTER_FOR_LAYER:
        return plan
    after = _AFTER_FOR_LAYER[layer or ""]
    if after is None:
        return MinifyPlan(mode="source", note=f"a bug in {layer} is in the captured graph itself: the FX minifier "
                                              "compares that graph with itself")
    return plan.model_copy(update={"after": after})


# where TORCHDYNAMO_REPRO_AFTER cuts, per layer: the graph after AOTAutograd only holds a bug of a later layer
# (decompositions are applied while AOTAutograd traces, so after aot both sides run them); None: the FX minifier
# cannot see the layer's bugs (it runs the graph Dynamo captured both ways)
_AFTER_FOR_LAYER: dict[str, Literal["aot", "dynamo"] | None] = {
    "Dynamo": None, DYNAMO_GUARDS: None, EXPORT: None, "AOTAutograd": "dynamo", "decompositions": "dynamo",
    "Inductor": "aot",
}


def reducer_for(category: str | None, layer: str | None) -> tuple[Literal["fx", "source"], Literal["aot", "dynamo"]]:
    """(mode, after) for minify: the plan of the category and the layer; a category without one (mode auto)
    follows the layer alone. The one choice localize's minifier call and minify(mode="auto") both make."""
    plan = minify_plan(category if category in PLAYBOOKS else None, layer)
    if plan.mode == "auto":
        after = _AFTER_FOR_LAYER.get(layer or "")
        return ("fx", after) if after else ("source", "aot")
    return plan.mode, plan.after or "aot"


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


class FileChoice(_Frozen):
    present: list[str] = Field(description="the files that exist in the repository, in order")
    upstream: str | None = Field(None, description="named only when none of them exists: the first, upstream")


def present_in(repo: Path, files: list[str]) -> FileChoice:
    """The files (a trailing / names a directory) that exist under repo; the first one when none does."""
    found = [f for f in files if ((repo / f).is_dir() if f.endswith("/") else (repo / f).is_file())]
    return FileChoice(present=found, upstream=None if found or not files else files[0])


class CategoryGuide(BaseModel):
    category: str
    layer: str | None = Field(None, description="the layer localize found; the playbook and the files follow it")
    log_preset: str | None = Field(None, description="the TORCH_LOGS spec to collect for this category")
    minify_level: int | None = Field(None, description="TORCHDYNAMO_REPRO_LEVEL for the FX minifier, if it applies")
    minify_after: Literal["aot", "dynamo"] | None = Field(None, description="TORCHDYNAMO_REPRO_AFTER for the FX "
                                                                            "minifier, if it applies")
    minify_mode: Literal["fx", "source", "auto"] | None = Field(None, description="minify(mode=...) that fits")
    outside_graph: str | None = Field(None, description=(
        "set when the bug lies outside the compiled graph (its outputs match eager): why the FX minifier and the "
        "kernels cannot show it, and where to read instead"))
    config_knobs: list[str] = Field(default_factory=list)
    source_files: list[str] = Field(default_factory=list, description="source to read, in order; with a case, only "
                                                                      "files present in its repository")
    test_files: list[str] = Field(default_factory=list, description="topical test files, most likely first; with a "
                                                                    "case, only files present in its repository")
    not_present: list[str] = Field(default_factory=list, description=(
        "NOT in the case's repository: the upstream PyTorch path of the likeliest file, named when none of the "
        "playbook's source or test files exists there"))
    playbook: str = Field(description="prompt name that returns the whole playbook")


def guide(category: str, layer: str | None = None, repo: Path | None = None) -> CategoryGuide:
    """The category's guide; with localize's layer, the playbook and files that layer calls for; with the case's
    repository, only the files present there."""
    chosen = focus(category, layer)
    found = PLAYBOOKS.get(chosen.playbook) if category in PLAYBOOKS or layer in LAYERS else None
    name = chosen.playbook if found is not None else category
    prompt = f'prompt "playbook" with category="{name}"'
    if found is None:
        return CategoryGuide(category=category, playbook=prompt)
    plan = minify_plan(category if category in PLAYBOOKS else None, layer)
    preset = log_preset(category, layer) if layer in LAYERS else found.category
    knobs = [k for k in found.config_knobs if not k.startswith(_MINIFY_KNOBS)]
    if plan.mode == "fx" and plan.level is not None:
        knobs = [f"TORCHDYNAMO_REPRO_AFTER={plan.after or 'aot'}", f"TORCHDYNAMO_REPRO_LEVEL={plan.level}", *knobs]
    spot = blind_spot(category, layer)
    if spot is not None:
        knobs = list(spot.config_knobs)
    result = CategoryGuide(
        category=category, layer=layer if layer in LAYERS else None,
        log_preset=PRESETS_SPEC.get(preset) or found.logs,
        minify_level=plan.level if plan.mode != "source" else None,
        minify_after=plan.after if plan.mode == "fx" else None,
        minify_mode=plan.mode, config_knobs=knobs, playbook=prompt, outside_graph=spot.note if spot else None,
    )
    return with_files(result, chosen.source_files, chosen.test_files, repo)


_MINIFY_KNOBS = ("TORCHDYNAMO_REPRO_AFTER=", "TORCHDYNAMO_REPRO_LEVEL=")
# every step-6 preset by name: the categories' and the layers'
PRESETS_SPEC: dict[str, str] = {**{name: p.logs for name, p in PLAYBOOKS.items() if p.logs}, **LAYER_PRESETS}


def with_files(current: CategoryGuide, source_files: list[str], test_files: list[str],
               repo: Path | None) -> CategoryGuide:
    """The guide naming these files; with the case's repository, only those present there (the others are
    named in not_present as upstream's)."""
    update: dict[str, list[str]] = {"source_files": list(source_files), "test_files": list(test_files),
                                    "not_present": []}
    if repo is not None:
        for kind, files in (("source", source_files), ("test", test_files)):
            choice = present_in(repo, files)
            update[f"{kind}_files"] = choice.present
            if choice.upstream:
                update["not_present"].append(f"{choice.upstream} (upstream PyTorch; not present in {repo})")
    return current.model_copy(update=update)


def diagnostic_call(category: str, case_id: str | None, script: str | None) -> str:
    """The exact next diagnostic tool call for a category (placeholders where the case or script is unknown)."""
    found = PLAYBOOKS.get(category) or PLAYBOOKS["unknown"]
    return format_call(found.diagnostic.tool, case_id=case_id or "<case_id>", script=script or "<repro.py>",
                       **found.diagnostic.arguments)


def logs_argument_description() -> str:
    """run_with_logs' `logs` argument, described from the table: every preset and what it sets besides TORCH_LOGS."""
    names = [name for name, playbook in PLAYBOOKS.items() if playbook.logs] + list(LAYER_PRESETS)
    extras = []
    for name in names:
        if name not in PLAYBOOKS:
            continue
        playbook = PLAYBOOKS[name]
        sets = [f"{key}={value}" for key, value in playbook.env.items()]
        sets += [f"Inductor's {key}" for key in playbook.inductor_config]
        if sets:
            extras.append(f"{name} also sets {', '.join(sets)}")
    return ("a TORCH_LOGS spec (e.g. '+dynamo,graph_breaks') or a preset named after a category: "
            + ", ".join(names) + ". " + "; ".join(extras))
