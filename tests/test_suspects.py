"""Suspects in torch's source: from exceptions raised inside torch, and from a bisected lowering."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import EXAMPLES
from mcp import Client

from pt2_bug_basher.analysis.failure import is_user_path
from pt2_bug_basher.analysis.suspects import (
    bisect_suspects,
    codegen_summary,
    exception_suspects,
    helper_candidates,
)
from pt2_bug_basher.domain.bisection import Application, BisectReport, SourceSite

pytestmark = pytest.mark.anyio
TORCH_PARENT = Path(torch.__file__).parent.parent


def source_line(relative: str, line: int) -> str:
    return (TORCH_PARENT / relative).read_text().splitlines()[line - 1]


async def test_an_exception_inside_dynamo_names_the_function_that_raised(server, workspace):
    """examples/dynamo_internal.py: Dynamo's own guard-signature check reads fn.__self__ on a staticmethod."""
    script = workspace / "dynamo_internal.py"
    shutil.copy(EXAMPLES / "dynamo_internal.py", script)
    async with Client(server) as client:
        env = await client.call_tool("check_env", {"python": sys.executable})
        case_id = env.structured_content["case_id"]
        run = (await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 1,
                                                        "script": str(script)})).structured_content
        classified = (await client.call_tool("classify_error", {"case_id": case_id,
                                                                "run_id": run["runs"][0]["run_id"]})).structured_content
    for suspects in (run["suspects"], classified["suspects"]):
        top = suspects[0]
        assert (top["file"], top["function"]) == ("torch/_dynamo/utils.py", "verify_guard_fn_signature"), suspects
        assert "__self__" in source_line(top["file"], top["line"])  # the very line that raises
        # plumbing (eval_frame, convert_frame) is never a suspect; callers follow, innermost first
        assert not any("convert_frame" in s["file"] or "eval_frame" in s["file"] for s in suspects)
        assert suspects[1]["function"] == "TENSOR_SUBCLASS_METADATA_MATCH"


def test_a_failed_comparison_has_no_suspect_in_torch_testing():
    code = "import torch\ntorch.testing.assert_close(torch.ones(2), torch.zeros(2))\n"
    stderr = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stderr
    assert "torch/testing/_comparison.py" in stderr
    assert exception_suspects(stderr) == []


def test_an_environment_under_a_folder_named_torch_does_not_make_its_packages_torch(tmp_path):
    # a CUDA machine's interpreter lives in /torch/.venv: Triton's compiler frames there are Triton's, not torch's
    env = tmp_path / "torch" / ".venv" / "lib" / "python3.12" / "site-packages"
    checkout = tmp_path / "ck" / "checkout" / "torch" / "_inductor"
    lines = ["Traceback (most recent call last):",
             f'  File "{checkout / "runtime" / "triton_heuristics.py"}", line 10, in _precompile_config',
             "    binary = triton.compile(*compile_args, **compile_kwargs)",
             f'  File "{checkout / "codegen" / "triton.py"}", line 20, in reduction_resize',
             "    return self.cse.generate(self.compute, value)",
             f'  File "{env / "triton" / "compiler" / "code_generator.py"}", line 452, in set_value',
             "    raise ValueError(name)",
             "ValueError: tmp3"]
    suspects = exception_suspects("\n".join(lines) + "\n")
    assert [s.file for s in suspects] == ["torch/_inductor/codegen/triton.py",
                                          "torch/_inductor/runtime/triton_heuristics.py"], suspects
    assert not is_user_path(str(env / "triton" / "compiler" / "code_generator.py"))
    assert not is_user_path(str(env / "torch" / "_dynamo" / "utils.py"))


def test_code_inductor_generated_that_raised_leaves_no_caller_as_suspect():
    # tests/data/corpus local samples (torch 2.13 CPU): the generated C++ kernel throws, and an FX graph's
    # generated forward calls torch._assert
    from corpus_samples import BY_ID

    thrown = BY_ID["local-rt_inductor_cpp_runtime_error"]["text"]
    assert "subclass_codegen.py:codegen(" in thrown and "runtime_wrappers.py" in thrown
    assert exception_suspects(thrown) == []  # AOTAutograd's wrappers only ran the kernel; localize finds its maker
    # the same code generated under a case's own Inductor caches (runs and bisection trials)
    generated = re.search(r'File "(/tmp/torchinductor[^"]+)", line \d+, in call', thrown)
    assert generated is not None
    for cache in ("inductor-cache", "bisect-cache"):
        moved = thrown.replace(generated.group(1), f"/w/.pt2-bug-basher/cases/c-1/{cache}/eh/ceh.py")
        assert exception_suspects(moved) == [], cache
    asserted = exception_suspects(BY_ID["local-rt_backend_runtime_assert"]["text"])
    assert [(s.file, s.function) for s in asserted] == [("torch/__init__.py", "_assert")]  # called by the code
    # a torch frame under a name torch made up for generated code is no file to open
    made_up = ('Traceback (most recent call last):\n'
               '  File "/v/torch/_functorch/_aot_autograd/subclass_codegen.py:codegen(x)", line 8, in _rw\n'
               '  File "/v/torch/_functorch/_aot_autograd/runtime_wrappers.py", line 9, in runtime_wrapper\n'
               '    raise RuntimeError("boom")\nRuntimeError: boom\n')
    assert [s.file for s in exception_suspects(made_up)] == ["torch/_functorch/_aot_autograd/runtime_wrappers.py"]


def test_a_bisected_lowering_ranks_the_helpers_the_failing_run_called():
    """pow's lowering refers to pow_recursive and pow_native (used by nothing else); a run with an integer
    exponent calls only pow_recursive, so only it follows pow once calls were counted."""
    from torch._inductor.lowering import lowerings

    from pt2_bug_basher._probes.bisect_probe import where

    site = where(lowerings[torch.ops.aten.pow.Tensor_Scalar])
    assert site is not None and site["function"] == "pow"
    assert source_line(site["file"], site["line"]).startswith("def pow("), site  # past its decorator
    culprit = Application(counter=0, debug="pow_1", subject="aten.pow.Tensor_Scalar", sites=[SourceSite(**site)])
    report = BisectReport(
        backend="inductor", subsystem="lowerings", kind="bisect", bisect_number=0, applications=1, culprit=culprit,
        result="BisectionResult(backend='inductor', subsystem='lowerings', bisect_number=0, debug_info='pow_1')",
        meaning="")
    candidates = helper_candidates(SourceSite(**site))
    assert {"pow_recursive", "pow_native"} <= set(candidates), candidates
    static = [s.function for s in bisect_suspects(report)]
    assert static[0] == "pow" and {"pow_recursive", "pow_native"} <= set(static), static
    culprit.helpers_called = {name: 3 if name == "pow_recursive" else 0 for name in candidates}
    suspects = bisect_suspects(report)
    assert [s.function for s in suspects] == ["pow", "pow_recursive"], suspects
    assert source_line(suspects[1].file, suspects[1].line).startswith("def pow_recursive(")
    assert "called it 3 time(s)" in suspects[1].why and "used by no other function" in suspects[1].why


def test_codegen_only_the_culprit_ran_is_kept_with_code_emitters_first():
    """The difference of two traces: what both trials ran, and generic helpers, are no evidence."""
    from pt2_bug_basher.domain.bisection import CodegenCall
    from pt2_bug_basher.reduce.bisect import codegen_difference

    def call(function: str, *, emits: bool, line: int = 1) -> CodegenCall:
        return CodegenCall(file="torch/_inductor/codegen/cpp.py", abs="/x/cpp.py", line=line, function=function,
                           calls=1, emits=emits)

    failing = [call("CppKernel.reduction", emits=False), call("CppOverrides.where", emits=True),
               call("CSEVariable.__hash__", emits=False), call("f.<locals>.<genexpr>", emits=False),
               call("reduction_init", emits=True), call("reduction_combine", emits=True, line=9)]
    passing = [call("CppOverrides.where", emits=True, line=5), call("CppKernel.load", emits=True)]
    only = codegen_difference(failing, passing)
    assert [c.function for c in only] == ["reduction_init", "reduction_combine", "CppKernel.reduction"]
    report = BisectReport(backend="inductor", subsystem="lowerings", kind="bisect", bisect_number=2, applications=3,
                          culprit=Application(counter=2, debug="amin", subject="aten.amin.default"), codegen=only,
                          result="", meaning="")
    summary = codegen_summary(report)
    assert "aten.amin.default" in summary
    assert all(f"{c.function} ({c.file}:{c.line})" in summary for c in only), summary
    assert codegen_summary(report.model_copy(update={"codegen": []})) == ""
    # a single-op graph runs every generic helper only with its op lowered: a sentence names the first few, the
    # suspects keep them all
    many = [call(f"emit_{i}", emits=True, line=10 + i) for i in range(3)]
    many += [call(f"helper_{i}", emits=False, line=20 + i) for i in range(5)]
    crowded = report.model_copy(update={"codegen": many})
    named = [s.function for s in bisect_suspects(crowded) if "generates kernel code" in s.why]
    assert named == [c.function for c in many], named
    sentence = codegen_summary(crowded)
    assert "emit_2 (" in sentence and "helper_0" not in sentence, sentence
    assert sentence.endswith(", and 5 more (the suspects list them)."), sentence


@pytest.fixture(scope="module")
def codegen_bug_checkout(tmp_path_factory: pytest.TempPathFactory):
    from planted_bugs import PLANTED, plant
    from torch_checkout import build_torch_checkout

    made = build_torch_checkout(tmp_path_factory.mktemp("codegen"))
    plant(made.checkout, PLANTED["cpp_reduction_init"])
    (made.checkout / "repro_amin.py").write_text(PLANTED["cpp_reduction_init"].repro)
    return made


@pytest.mark.slow
async def test_a_code_generation_bug_is_traced_past_the_lowering(codegen_bug_checkout):
    """The planted bug is in the C++ backend's reduction_init, not in amin's lowering: the bisection can only
    name the lowering, and the code generation that ran only with it lowered leads to the guilty function."""
    from pt2_bug_basher.case.config import ServerConfig
    from pt2_bug_basher.mcp_server.server import create_server

    made = codegen_bug_checkout
    config = ServerConfig(state_dir=made.root / "state", default_repo=made.checkout, allowed_roots=(made.root,))
    async with Client(create_server(config)) as client:
        env = await client.call_tool("check_env", {"python": str(made.python), "repo": str(made.checkout)})
        case_id = env.structured_content["case_id"]
        run = await client.call_tool("run_with_logs", {"case_id": case_id, "script": "repro_amin.py", "repeat": 2})
        assert run.structured_content["reproduced"], run.structured_content
        result = await client.call_tool("localize", {"case_id": case_id})
        classified = (await client.call_tool("classify_error", {
            "case_id": case_id, "run_id": run.structured_content["runs"][0]["run_id"]})).structured_content
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    # the guide reads localize's suspects' files first
    suspect_files = list(dict.fromkeys(s["file"] for s in data["suspects"]))
    assert classified["guide"]["source_files"][:2] == suspect_files[:2], (classified["guide"], suspect_files)
    bisection = data["bisection"]
    assert data["layer"] == "Inductor" and bisection["subsystem"] == "lowerings", bisection
    assert bisection["culprit"]["subject"] == "aten.amin.default", bisection["culprit"]
    codegen = bisection["codegen"]
    assert 0 < len(codegen) <= bisection["codegen_total"], bisection
    assert all(c["file"].startswith("torch/_inductor/codegen/") for c in codegen), codegen
    names = [c["function"] for c in codegen]
    # masked_fill is generated in both trials (only amin falls back): its code is no suspect
    assert not any(name.endswith(".where") for name in names), names
    assert not any("__" in name or "<genexpr>" in name for name in names), names
    guilty = next(c for c in codegen if c["function"] == "reduction_init")
    assert "reduction_init at torch/_inductor/codegen/cpp.py:" in data["meaning"], data["meaning"]
    assert guilty["emits"] and guilty["abs"].startswith(str(made.checkout))
    assert (made.checkout / guilty["file"]).read_text().splitlines()[guilty["line"] - 1].startswith(
        "def reduction_init(")
    emits = [c["emits"] for c in codegen]
    assert emits == sorted(emits, reverse=True), codegen  # code emitters first
    ranked = [(s["file"], s["function"]) for s in data["suspects"]]
    # the function HEAD changed comes first; the lowering the bisection isolated follows
    assert ranked[0] == ("torch/_inductor/codegen/cpp.py", "reduction_init"), ranked
    assert ranked[1] == ("torch/_inductor/lowering.py", "make_reduction.<locals>.inner"), ranked
    assert "HEAD itself" in data["suspects"][0]["why"], data["suspects"][0]
    assert "First suspect: reduction_init at torch/_inductor/codegen/cpp.py:" in data["meaning"], data["meaning"]
    # the planting commit is HEAD and changed reduction_init alone: localize names it, and nothing else
    from planted_bugs import PLANTED

    planted = PLANTED["cpp_reduction_init"].commit_message
    said = [data["meaning"], *data["notes"]]
    changed = [s for s in said if " was changed by " in s]
    assert len(changed) == 1 and f'"{planted}"' in changed[0], said
    assert "reduction_init (torch/_inductor/codegen/cpp.py:" in changed[0] and "HEAD itself" in changed[0]
    # said once in the meaning: the first suspect names the commit, the full sentence is a note
    assert changed[0] in data["notes"] and data["meaning"].count(f'"{planted}"') == 1, data["meaning"]
    assert "The change to read once the test fails: git show " in data["meaning"]


def test_a_traceback_cut_before_its_exception_line_says_so_in_its_suspects():
    site = "/opt/conda/lib/python3.10/site-packages/torch/_inductor/lowering.py"
    cut = (f'  File "{site}", line 412, in wrapped\n'
           "    out = decomp_fn(*args, **kwargs)\n"
           f'  File "{site}", line 6120, in pow_recursive\n')
    top, *rest = exception_suspects(cut)
    assert (top.file, top.line, top.function) == ("torch/_inductor/lowering.py", 6120, "pow_recursive")
    assert top.why == "innermost torch frame where the traceback stops (no exception line shown)", top
    assert "exception" not in " ".join(s.why for s in rest), rest


def test_dynamos_re_raise_of_a_fake_tensor_failure_is_plumbing():
    """Dynamo turns a failed fake-tensor run into a graph break through a wrapper and a `lambda: unimplemented(...)`;
    neither is a suspect (a trial agent was sent to them): the frames that ran the node with fake tensors lead."""
    utils, builder = "/venv/lib/python3.11/site-packages/torch/_dynamo/utils.py", \
        "/venv/lib/python3.11/site-packages/torch/_dynamo/variables/builder.py"
    frames = [(builder, 3767, "_wrap_fx_proxy"), (utils, 3949, "get_fake_value"), (utils, 4154, "_get_fake_value_impl"),
              (utils, 3938, "_wrap_graph_break_with_torch_runtime_err"),
              (utils, 3935, "_wrap_graph_break_with_torch_runtime_err"), (utils, 4155, "<lambda>"),
              (utils.replace("utils.py", "exc.py"), 723, "unimplemented")]

    def traceback(stack: list[tuple[str, int, str]]) -> str:
        return "Traceback (most recent call last):\n" + "".join(
            f'  File "{file}", line {line}, in {name}\n    pass\n' for file, line, name in stack) + \
            "torch._dynamo.exc.TorchRuntimeError: RuntimeError when making fake tensor call\n"

    names = [s.function for s in exception_suspects(traceback(frames))]
    assert names[:2] == ["_get_fake_value_impl", "get_fake_value"], names
    assert not {"<lambda>", "_wrap_graph_break_with_torch_runtime_err", "unimplemented"} & set(names), names
    # a lambda that raised on its own line hands nothing over: it stays a suspect
    assert exception_suspects(traceback(frames[:-1]))[0].function == "<lambda>"


STAGE = '''\
def stage2(x):
    if x > 0:
        return None
    return x, x


def given(value):
    return value.shape


def register(name):
    def wrap(fn):
        return fn
'''
OPS = '''\
from .stage import register


@register("double")
def double(x):
    return 2 * x
'''
TRACE = '''\
from .stage import given


def export(x):
    from torch._fake.stage import stage2

    gm, meta = stage2(x)
    return gm


class Lowering:
    def _layout(self):
        return None

    def emit(self, x):
        layout = self._layout()
        size = x + 1
        return layout.stride + size


def passes_on(x):
    return given(x)


def branch(flag):
    return 1, 2


def speculate(x):
    def branch(flag):
        return None if flag else (x, x)

    a, b = branch(True)
    return a


def format_args(args):
    def rep(a):
        return None if a else str(a)

    def fmt(items):
        res = [rep(a) for a in items]
        return ", ".join(res)

    return fmt(args)


class Holder:
    def helper(self):
        return None

    def use(self):
        def helper():
            return 1, 2

        a, b = self.helper()
        return a
'''


@pytest.mark.parametrize(("call", "producer", "used_in"), [
    ("export(1)", ("torch/_fake/stage.py", 1, "stage2"), "export"),
    ("Lowering().emit(1)", ("torch/_fake/trace.py", 12, "Lowering._layout"), "Lowering.emit"),
    ("passes_on(None)", None, "given"),
    ("__import__('torch._fake.ops')", ("torch/_fake/stage.py", 11, "register"), "<module>"),
    # a closure, not the module's function of the same name, gave the None the line unpacked
    ("speculate(1)", ("torch/_fake/trace.py", 30, "speculate.<locals>.branch"), "speculate"),
    # the items of a list built by a closure (a sibling of the function that used them)
    ("format_args([1])", ("torch/_fake/trace.py", 38, "format_args.<locals>.rep"), "format_args.<locals>.fmt"),
    # `self.helper()` is the method, never a closure of the same name
    ("Holder().use()", ("torch/_fake/trace.py", 49, "Holder.helper"), "Holder.use"),
])
def test_a_none_used_inside_torch_names_the_call_that_returned_it(tmp_path: Path, call, producer, used_in):
    package = tmp_path / "torch" / "_fake"
    package.mkdir(parents=True)
    for path, text in ((tmp_path / "torch" / "__init__.py", ""), (package / "__init__.py", ""),
                       (package / "stage.py", STAGE), (package / "trace.py", TRACE), (package / "ops.py", OPS)):
        path.write_text(text)
    script = f"import sys; sys.path.insert(0, {str(tmp_path)!r})\nfrom torch._fake.trace import *\n{call}\n"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "NoneType" in run.stderr, run.stderr
    suspects = exception_suspects(run.stderr)
    raising = [s for s in suspects if s.why.startswith("innermost torch frame")]
    assert len(raising) == 1 and raising[0].function.endswith(used_in.split(".")[-1]), suspects
    if producer is None:  # the None came in as an argument: no call in the frame gave it
        assert suspects[0] is raising[0], suspects
        return
    top = suspects[0]
    assert (top.file, top.line, top.function) == producer, top
    assert top.why.startswith("returned the None that ") and "NoneType" in top.why, top.why
    assert suspects[1] is raising[0]
