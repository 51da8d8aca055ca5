"""TORCH_LOGS presets, spec validation and log parsing, on logs captured from torch 2.13 (tests/data/logs)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pt2_bug_basher.analysis.torch_logs import PRESETS, LogSummary, parse_logs, resolve_logs
from pt2_bug_basher.domain.errors import InvalidInput

REPO_ROOT = Path(__file__).resolve().parents[1]
LOGS = REPO_ROOT / "tests" / "data" / "logs"
EXAMPLES = REPO_ROOT / "examples"

# What torch 2.13's registry holds (a subset is enough for validation tests).
COMPONENTS = ["aot", "dynamic", "dynamo", "export", "inductor", "torch"]
ARTIFACTS = ["aot_graphs", "aot_joint_graph", "bytecode", "graph_breaks", "graph_code", "guards", "output_code",
             "post_grad_graphs", "recompiles", "recompiles_verbose", "schedule", "side_effects"]

CATEGORIES = ["graph_break", "recompile", "dynamo_internal", "triton", "backend_compiler_failed", "accuracy",
              "runtime_crash", "export"]


def parse(name: str) -> LogSummary:
    return parse_logs((LOGS / name).read_text())


def breaks(summary: LogSummary) -> list[tuple[str, str | None, int]]:
    return [(b.reason, b.location, b.count) for b in summary.graph_breaks]


# ---------------------------------------------------------------------------------------------
# presets and validation
# ---------------------------------------------------------------------------------------------


def test_every_category_has_a_preset_and_every_preset_is_valid():
    from pt2_bug_basher.playbooks import IN_LAYER

    assert set(CATEGORIES) <= set(PRESETS)
    assert set(IN_LAYER.values()) <= set(PRESETS)  # a (category, layer)'s preset is one run_with_logs takes
    for name, spec in PRESETS.items():
        assert resolve_logs(name, COMPONENTS, ARTIFACTS) == spec
        # the spec itself passes validation unchanged
        assert resolve_logs(spec, COMPONENTS, ARTIFACTS) == spec, name


def test_presets_resolve():
    assert resolve_logs("graph_break", COMPONENTS, ARTIFACTS) == "graph_breaks"
    assert resolve_logs("recompile", COMPONENTS, ARTIFACTS) == "recompiles,recompiles_verbose,guards"
    assert resolve_logs("dynamo_internal", COMPONENTS, ARTIFACTS) == "+dynamo"
    assert resolve_logs(" export ", COMPONENTS, ARTIFACTS) == "+export,dynamic"  # the preset wins over the component


@pytest.mark.parametrize("spec,expected", [
    ("+dynamo,recompiles", "+dynamo,recompiles"),
    ("torch._dynamo", "torch._dynamo"),
    ("+torch._inductor.codecache", "+torch._inductor.codecache"),
    ("all", "all"),
    ("+all", "+all"),
    ("-dynamo,+inductor", "-dynamo,+inductor"),
    ("+output_code", "+output_code"),
    ("dynamo, graph_breaks", "dynamo,graph_breaks"),  # torch allows spaces after commas; normalised away
    ("graph_breaks,graph_breaks", "graph_breaks"),
    ("torch", "torch"),
])
def test_valid_specs(spec, expected):
    assert resolve_logs(spec, COMPONENTS, ARTIFACTS) == expected


def test_unknown_name_names_close_matches_and_presets():
    with pytest.raises(InvalidInput) as err:
        resolve_logs("+graph_breakz", COMPONENTS, ARTIFACTS)
    text = str(err.value)
    assert "'graph_breakz'" in text and "graph_breaks" in text
    assert "Presets:" in text and "recompile" in text and "backend_compiler_failed" in text


def test_preset_inside_a_list_is_rejected_with_the_real_name():
    with pytest.raises(InvalidInput) as err:
        resolve_logs("graph_break,recompile_s", COMPONENTS, ARTIFACTS)
    text = str(err.value)
    assert "'graph_break' is a preset" in text and "graph_breaks" in text
    assert "'recompile_s'" in text and "recompiles" in text  # every problem is reported at once


@pytest.mark.parametrize("spec,needle", [
    ("", "empty"),
    ("   ", "empty"),
    ("dynamo,", "empty"),
    (",dynamo", "empty"),
    ("dyn amo", "not a name"),
    ("++dynamo", "not a name"),
    ("+", "no name"),
    ("dynamo\x00", "control character"),
    ("dynamo\ngraph_breaks", "control character"),
    ("x" * 5000, "characters"),
    (",".join(["dynamo"] * 100), "entries"),
    ("help", "help"),
    ("some.module", "must start with 'torch.'"),
    ("dynamo;rm", "not a valid name"),
    ("torch._dynamo..x", "unknown name"),
])
def test_invalid_specs(spec, needle):
    with pytest.raises(InvalidInput) as err:
        resolve_logs(spec, COMPONENTS, ARTIFACTS)
    assert needle in str(err.value)


def test_names_come_from_the_environment_with_a_fallback():
    with pytest.raises(InvalidInput):
        resolve_logs("schedule", ["dynamo"], ["graph_breaks"])  # not registered by that torch
    # when the probe could not list names, torch 2.13's are used
    assert resolve_logs("schedule,+inductor", [], []) == "schedule,+inductor"


# ---------------------------------------------------------------------------------------------
# graph breaks
# ---------------------------------------------------------------------------------------------

LOGS_ONLY_BREAKS = [
    ("Failed to trace builtin operator", "graph_break_logs_only.py:24", 1),
    ("Data-dependent branching", "graph_break_logs_only.py:25", 1),
]


def test_graph_breaks_of_the_logs_only_example():
    s = parse("graph_breaks.graph_break_logs_only.log")
    assert breaks(s) == LOGS_ONLY_BREAKS
    assert s.unique_graph_break_count == 2 and s.total_graph_break_count == 2
    first, second = s.graph_breaks
    assert first.file == "/src/pt2-bug-basher/examples/graph_break_logs_only.py" and first.line == 24
    assert "builtin operator `print`" in first.explanation
    assert first.gb_id == "gb0059" and second.gb_id == "gb0170"
    assert any("torch.cond" in h for h in second.hints)
    assert not first.fatal and not second.fatal
    assert s.graphs_compiled is None and s.frames_compiled is None  # graph_breaks alone does not show them
    assert s.compile_ids == ["0/0", "1/0"]
    assert s.recompiles == []


def test_stdout_interleaved_with_the_log_is_skipped():
    text = (LOGS / "graph_breaks.graph_break_logs_only.combined.log").read_text()
    assert "y = tensor(" in text
    assert breaks(parse_logs(text)) == LOGS_ONLY_BREAKS


def test_repeated_breaks_are_counted_and_two_breaks_on_one_line_are_kept_apart():
    s = parse("graph_breaks.graph_break_variety.log")
    assert breaks(s) == [
        ("Failed to trace builtin operator", "graph_break_variety.py:14", 2),
        ("Data-dependent branching", "graph_break_variety.py:15", 2),
        ("Failed to trace builtin operator", "graph_break_variety.py:17", 2),
        ("Cannot trace user-defined __len__", "graph_break_variety.py:17", 1),
    ]
    assert s.unique_graph_break_count == 4 and s.total_graph_break_count == 7
    assert "`memoryview`" in s.graph_breaks[2].explanation
    assert s.graph_breaks[3].gb_id == "gb6012"


def test_logs_without_torchs_line_prefix_give_the_same_result():
    plain = parse("graph_breaks.graph_break_variety.message_only.log")
    prefixed = parse("graph_breaks.graph_break_variety.log")
    assert plain.graph_breaks == prefixed.graph_breaks
    assert plain.compile_ids == []


def test_fullgraph_error_is_a_fatal_graph_break():
    s = parse("stderr.graph_break_fullgraph.log")
    assert breaks(s) == [("Data-dependent branching", "graph_break_fullgraph.py:21", 1)]
    b = s.graph_breaks[0]
    assert b.fatal and b.line == 21 and b.gb_id == "gb0170"
    assert b.file.endswith("examples/graph_break_fullgraph.py")
    assert b.explanation.startswith("Detected data-dependent branching")


def test_strict_export_failure_points_at_user_code_not_at_torch():
    s = parse("stderr.export_failure.log")
    assert breaks(s) == [("Data-dependent branching", "export_failure.py:21", 1)]
    assert s.graph_breaks[0].fatal


def test_an_error_the_log_also_reported_is_counted_once():
    logged = (LOGS / "graph_breaks.graph_break_logs_only.log").read_text()
    raised = (
        "Traceback (most recent call last):\n"
        "torch._dynamo.exc.Unsupported: Data-dependent branching\n"
        "  Explanation: Detected data-dependent branching.\n\n"
        "from user code:\n"
        '   File "/src/pt2-bug-basher/examples/graph_break_logs_only.py", line 25, in f\n'
        "    if y.sum() > 0:  # graph break 2\n\n"
        "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace\n"
    )
    s = parse_logs(logged + raised)
    assert breaks(s) == LOGS_ONLY_BREAKS
    assert s.graph_breaks[1].fatal and not s.graph_breaks[0].fatal


def test_failures_that_are_not_graph_breaks_have_none():
    for name in ("stderr.dynamo_internal.log", "stderr.runtime_error.log", "stderr.backend_compiler_failed.log"):
        s = parse(name)
        assert s.graph_breaks == [] and s.recompiles == [] and s.total_graph_break_count == 0, name
    # the recompile-limit error is an Unsupported, but not about user code: no graph break
    assert parse("recompiles.recompile_limit.log").graph_breaks == []


# ---------------------------------------------------------------------------------------------
# recompiles
# ---------------------------------------------------------------------------------------------

RECOMPILE_REASONS = [
    "tensor 'x' size mismatch at index 0. expected 3, actual 4",
    "tensor 'x' dtype mismatch. expected Float, actual Double",
    "scale == 2",
]


def test_three_recompiles_with_their_reasons():
    s = parse("recompiles.recompile_reasons.log")
    assert [r.reason for r in s.recompiles] == RECOMPILE_REASONS
    assert all(r.function == "g" and r.location == "recompile_reasons.py:12" and r.count == 1 for r in s.recompiles)
    size, dtype, value = s.recompiles
    # without a guards dump a tensor mismatch has no guard text; an expression guard is its own text
    assert size.guard is None and dtype.guard is None
    assert value.guard == "scale == 2" and value.guard_location == "recompile_reasons.py:14"


def test_verbose_recompiles_with_guards_name_the_tensor_guard_that_failed():
    s = parse("recompiles_verbose_guards.recompile_reasons.log")
    assert [r.reason for r in s.recompiles] == RECOMPILE_REASONS
    size, dtype, value = s.recompiles
    # the guard of the rejected entry: 0/0 for the shape change (static size 3), 0/1 for the dtype change
    assert size.guard.startswith("TENSOR_MATCH: check_tensor(L['x'], Tensor,")
    assert "torch.float32" in size.guard and "size=[3]" in size.guard
    assert "torch.float32" in dtype.guard and "size=[None]" in dtype.guard
    assert size.guard_location == "recompile_reasons.py:14"
    assert value.guard == "scale == 2"
    assert s.compile_ids == ["0/0", "0/1", "0/2", "0/3"]


def test_verbose_recompiles_without_prefix():
    s = parse("recompiles_verbose.recompile_reasons.message_only.log")
    assert [r.reason for r in s.recompiles] == RECOMPILE_REASONS


def test_recompile_limit():
    s = parse("recompiles.recompile_limit.log")
    assert [(r.function, r.reason, r.guard, r.count) for r in s.recompiles] == [
        ("f", "scale == 1", "scale == 1", 1),
        ("f", "scale == 2", "scale == 2", 1),
    ]
    assert s.recompile_limit_hit
    assert not parse("recompiles.recompile_reasons.log").recompile_limit_hit
    # the exception alone (no recompiles log) also tells
    text = (LOGS / "recompiles.recompile_limit.log").read_text()
    assert parse_logs(text[text.index("Traceback"):]).recompile_limit_hit


def test_same_recompile_twice_is_counted():
    text = (LOGS / "recompiles.recompile_reasons.log").read_text()
    s = parse_logs(text + "\n" + text)
    assert [r.count for r in s.recompiles] == [2, 2, 2]


# ---------------------------------------------------------------------------------------------
# graphs and frames
# ---------------------------------------------------------------------------------------------


def test_graph_and_frame_counts():
    debug = parse("dynamo_debug.graph_break_logs_only.log")
    assert (debug.graphs_compiled, debug.frames_compiled) == (3, 3)  # the restart [0/0_1] is not a new frame
    assert breaks(debug) == LOGS_ONLY_BREAKS
    info = parse("dynamo_info.graph_break_logs_only.log")
    assert (info.graphs_compiled, info.frames_compiled) == (3, 3)
    code = parse("graph_code.graph_break_logs_only.log")
    assert (code.graphs_compiled, code.frames_compiled) == (3, None)
    recompiles = parse("dynamo_debug.recompile_reasons.log")
    assert (recompiles.graphs_compiled, recompiles.frames_compiled) == (4, 4)
    assert recompiles.recompiles == []  # +dynamo does not print recompile reasons


# ---------------------------------------------------------------------------------------------
# robustness
# ---------------------------------------------------------------------------------------------


def test_rank_prefixes_and_crlf():
    text = (LOGS / "graph_breaks.graph_break_logs_only.log").read_text()
    ranked = "\r\n".join("[rank0]:" + line for line in text.splitlines())
    assert breaks(parse_logs(ranked)) == LOGS_ONLY_BREAKS


def test_empty_and_garbage_input():
    assert parse_logs("") == LogSummary()
    s = parse_logs("Graph Break Reason: orphan\n\x00\x01 binary \udcff junk\nRecompiling function\n- 0/0: x\n")
    assert s.graph_breaks == [] and s.recompiles == []


def test_truncated_block_still_counts():
    text = (LOGS / "graph_breaks.graph_break_logs_only.log").read_text()
    cut = text[: text.index("Graph Break Reason: Data-dependent") + 60]
    assert [b.location for b in parse_logs(cut).graph_breaks] == ["graph_break_logs_only.py:24",
                                                                  "graph_break_logs_only.py:25"]


def test_multi_megabyte_logs_are_fast():
    parts = [(LOGS / n).read_text() for n in ("dynamo_debug.graph_break_logs_only.log",
                                              "recompiles_verbose_guards.recompile_reasons.log",
                                              "graph_breaks.graph_break_variety.log",
                                              "stderr.backend_compiler_failed.log")]
    big = "".join(parts) * 20
    assert len(big) > 4_000_000
    start = time.perf_counter()
    s = parse_logs(big)
    elapsed = time.perf_counter() - start
    assert s.total_graph_break_count == 20 * (2 + 7) and s.unique_graph_break_count == 6
    assert [r.count for r in s.recompiles] == [20, 20, 20]
    assert elapsed < 2.0, elapsed


# ---------------------------------------------------------------------------------------------
# live: the example, run now with TORCH_LOGS=graph_breaks
# ---------------------------------------------------------------------------------------------


def test_live_graph_break_example_parses_to_its_two_breaks():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_LOGS", "TORCHDYNAMO", "TORCH_TRACE"))}
    env["TORCH_LOGS"] = "graph_breaks"
    try:
        proc = subprocess.run([sys.executable, str(EXAMPLES / "graph_break_logs_only.py")], env=env,
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("examples/graph_break_logs_only.py took over 60 s")
    if proc.returncode != 0 and "No module named 'torch'" in proc.stderr:
        pytest.skip("torch is not installed in this interpreter")
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = parse_logs(proc.stderr)
    assert breaks(s) == LOGS_ONLY_BREAKS
    assert s.graph_breaks[0].file == str(EXAMPLES / "graph_break_logs_only.py")


# ---------------------------------------------------------------------------------------------
# generated kernels in the output_code log
# ---------------------------------------------------------------------------------------------

TRITON_MODULE = '''# AOT ID: ['0_inference']
from torch._inductor.async_compile import AsyncCompile
async_compile = AsyncCompile()


# kernel path: /tmp/torchinductor_user/ab/cabexample.py
# Topologically Sorted Source Nodes: [relu, mul], Original ATen: [aten.relu, aten.mul]
# Source node to ATen node mapping:
#   mul => mul
triton_poi_fused_mul_relu_0 = async_compile.triton('triton_poi_fused_mul_relu_0', \'\'\'
import triton
import triton.language as tl

@triton_heuristics.pointwise(
    size_hints={'x': 64},
    filename=__file__,
)
@triton.jit
def triton_poi_fused_mul_relu_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 64
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    tmp0 = tl.load(in_ptr0 + (xindex), xmask)
    tmp1 = tmp0 + 1
    tmp2 = 2.0
    tmp3 = tmp1 * tmp2
    tl.store(out_ptr0 + (xindex), tmp3, xmask)
\'\'\', device_str='cuda')


async_compile.wait(globals())
del async_compile

class Runner:
    def call(self, args):
        arg0_1, = args
        buf0 = empty_strided_cuda((8, 8), (8, 1), torch.float32)
        triton_poi_fused_mul_relu_0.run(arg0_1, buf0, 64, stream=stream0)
        return (buf0, )


if __name__ == "__main__":
    from torch._inductor.wrapper_benchmark import compiled_module_main
    compiled_module_main('None', lambda times, repeat: benchmark_compiled_module(args, times=times, repeat=repeat))
'''


def _output_code_log(module: str, compile_id: str, line: int) -> str:
    """A module as the output_code log prints it: one record, every line with torch's prefix."""
    prefix = f"V1203 15:24:44.474000 6656 torch/_inductor/graph.py:{line}] [{compile_id}] [__output_code] "
    return "\n".join(prefix + text for text in ["Output code: ", *module.splitlines()]) + "\n"


def test_logged_kernels_come_from_the_output_code_records():
    from pt2_bug_basher.analysis.torch_logs import logged_kernels

    cpu_log = (LOGS / "stderr.runtime_error.log").read_text()
    text = (_output_code_log(TRITON_MODULE, "0/0", 2722) + "some print output\n"
            + _output_code_log(TRITON_MODULE.replace("_0", "_1"), "1/0", 2722)
            + "V1203 15:24:44.475000 6656 torch/_inductor/graph.py:2733] [1/0] [__output_code] Output code written "
              "to: /tmp/torchinductor_user/p4/cp4.py\n" + cpu_log)
    kernels, left_out = logged_kernels(text)
    assert [(k.name, k.kind, k.compile_id) for k in kernels] == [
        ("triton_poi_fused_mul_relu_0", "triton pointwise", "[0/0]"),
        ("triton_poi_fused_mul_relu_1", "triton pointwise", "[1/0]")]
    assert left_out == []
    first = kernels[0]
    assert first.source_nodes == ["relu", "mul"] and first.aten_ops == ["aten.relu", "aten.mul"]
    lines = first.code.splitlines()
    assert lines[0].startswith("# Topologically Sorted Source Nodes: [relu, mul]")
    assert lines[1:3] == ["@triton.jit", "def triton_poi_fused_mul_relu_0(in_ptr0, out_ptr0, xnumel, "
                                         "XBLOCK : tl.constexpr):"]
    assert "    tmp1 = tmp0 + 1" in lines and "    tl.store(out_ptr0 + (xindex), tmp3, xmask)" in lines
    assert not any("import" in line or "size_hints" in line or "compiled_module_main" in line for line in lines)
    # Past the budget, a kernel is named but its code left out.
    kept, dropped = logged_kernels(text, max_chars=len(first.code) + 100)
    assert [k.name for k in kept] == ["triton_poi_fused_mul_relu_0"] and dropped == ["triton_poi_fused_mul_relu_1"]
    # Without output code records there is nothing to give.
    assert logged_kernels(cpu_log) == ([], [])


ALIASING = '''
import torch


def f(x, w):
    x.mul_(2)
    return x * w, x.t()


torch.compile(f, backend="aot_eager")(torch.ones(2, 3), torch.ones(2, 3))
torch.compile(lambda a, w: (a * w, a.t()), backend="aot_eager")(torch.ones(2, 3, requires_grad=True), torch.ones(2, 3))
'''


def test_aot_metadata_names_mutated_inputs_and_outputs_regenerated_as_views(tmp_path: Path):
    from pt2_bug_basher.analysis.torch_logs import aot_metadata

    (tmp_path / "aliasing.py").write_text(ALIASING)
    done = subprocess.run([sys.executable, "aliasing.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TORCH_LOGS": PRESETS["aot_autograd"],
                               "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    mutated, grad = aot_metadata(done.stderr)
    assert mutated.compile_id == "0/0" and mutated.inputs == ["input 0: data mutated"], mutated
    assert mutated.outputs[0] == "output 0: non_alias"
    assert mutated.outputs[1].startswith("output 1: alias_of_input of input 0, regenerated by the views t"), mutated
    assert grad.compile_id == "1/0" and grad.inputs == ["input 0: requires grad"], grad
    assert grad.outputs[1].endswith("regenerated by the views t, requires grad"), grad
    assert aot_metadata(done.stdout) == []  # nothing without the log


FOLDED_SIZE = '''
import torch

print(torch.compile(lambda x: x.sum(-1) / x.size(-1), backend="eager")(torch.ones(2, 3)))
'''


def test_captured_graphs_show_a_size_dynamo_folded_into_a_constant(tmp_path: Path):
    """Seen by an agent: a wrong size Dynamo folded in showed only in the graph_code log, not in the result."""
    from pt2_bug_basher.analysis.torch_logs import captured_graphs

    (tmp_path / "folded.py").write_text(FOLDED_SIZE)
    done = subprocess.run([sys.executable, "folded.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TORCH_LOGS": "graph_code",
                               "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    (graph,) = captured_graphs(done.stderr)
    assert graph.compile_id == "0/0" and graph.name == "__compiled_fn_1", graph
    assert graph.code[0].startswith("def forward(self, L_x_"), graph.code
    assert any(line.strip().startswith("truediv") and "sum_1 / 3" in line for line in graph.code), graph.code
    assert any(line.strip().startswith("# File: ") for line in graph.code), graph.code
    assert captured_graphs(done.stdout) == []  # nothing without the log
