"""Tests for pt2_bug_basher.analysis.failure: parsing error output into a failure record."""

from __future__ import annotations

import pytest
from corpus_samples import BY_ID, LOCAL, LOCAL_GPU, PUBLIC
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pt2_bug_basher.analysis.failure import FailureRecord, is_user_path, normalise_message, parse_failure


def record(sid: str) -> FailureRecord:
    d = BY_ID[sid]
    r = parse_failure(d["text"], d.get("exit_code"), d.get("signal_name"))
    assert r is not None, sid
    return r


# --------------------------------------------------------------------------------------------
# Signatures

RUN_PAIRS = sorted({d["script_name"] for d in LOCAL if d.get("run", 1) == 2})


def test_corpus_has_repeated_runs() -> None:
    assert len(RUN_PAIRS) >= 4


@pytest.mark.parametrize("script", RUN_PAIRS)
def test_same_failure_in_two_processes_has_the_same_signature(script: str) -> None:
    first, second = (d for d in sorted((d for d in LOCAL if d["script_name"] == script), key=lambda d: d["run"]))
    # the two outputs really differ (temporary paths, PIDs, timestamps) ...
    if script in ("bcf_inductor_cpp_compile_error.py", "rc_recompile_limit.py"):
        assert first["text"] != second["text"]
    a = parse_failure(first["text"], first["exit_code"], first["signal_name"])
    b = parse_failure(second["text"], second["exit_code"], second["signal_name"])
    assert a is not None and b is not None
    # ... but not in the failure
    assert a.signature == b.signature
    assert a.exception_type == b.exception_type


def test_different_failures_have_different_signatures() -> None:
    sigs: dict[str, str] = {}
    for d in LOCAL + LOCAL_GPU:
        r = parse_failure(d["text"], d.get("exit_code"), d.get("signal_name"))
        if r is None:
            continue
        sigs.setdefault(d["script_name"], r.signature)
    assert len(set(sigs.values())) == len(sigs), sigs


def test_signature_is_readable_and_hashed() -> None:
    r = record("local-gb_fullgraph_print")
    assert r.signature.startswith("Unsupported: Failed to trace builtin operator @ gb_fullgraph_print.py:forward#")
    head, digest = r.signature.rsplit("#", 1)
    assert len(digest) == 8 and int(digest, 16) >= 0


def test_signature_ignores_addresses_paths_and_timings() -> None:
    base = ('Traceback (most recent call last):\n'
            '  File "{root}/repro.py", line 9, in <module>\n    f(x)\n'
            '  File "{root}/venv/lib/python3.11/site-packages/torch/_inductor/graph.py", line {ln}, in run\n'
            '    x\n'
            'RuntimeError: failed at 0x{addr} in {tmp}/torchinductor_{user}/ab/c{key}.py pid={pid} '
            'after {secs}s in __compiled_fn_{n}\n')
    one = base.format(root="/home/a", ln=100, addr="7f00aa", tmp="/tmp", user="a", key="x" * 51, pid=11,
                      secs="1.5", n=3)
    two = base.format(root="/srv/b/c", ln=230, addr="7fbb01", tmp="/tmp", user="b", key="y" * 51, pid=999,
                      secs="22.0", n=17)
    a, b = parse_failure(one, 1), parse_failure(two, 1)
    assert a is not None and b is not None
    assert a.signature == b.signature
    other = parse_failure(one.replace("RuntimeError: failed", "RuntimeError: crashed"), 1)
    assert other is not None and other.signature != a.signature


def test_normalise_message() -> None:
    msg = ("object at 0x7f3a2b1c00d0 in "
           "/tmp/torchinductor_root/4u/c4ukle6zwjohn2xwsjpc6v5jualdqmtcuvfnhxvqb4cfqnvxdrid.py "
           "pid=8206 took 1.23s; __compiled_fn_12 cpp_fused_relu_3 [0/1] <eval_with_key>.1057 "
           "/var/folders/xy/abc/T/tmpk2/x.py max diff 3.34565806388855 shape torch.Size([64, 3])")
    out = normalise_message(msg)
    for gone in ("0x7f3a", "torchinductor_root", "c4ukle6", "8206", "1.23s", "_12 ", "relu_3", "[0/1]", ".1057",
                 "/var/folders", "3.3456"):
        assert gone not in out, (gone, out)
    assert "torch.Size([64, 3])" in out  # shapes are kept
    assert "cpp_fused_relu_N" in out and "__compiled_fn_N" in out  # kernel names kept, counters not
    assert normalise_message(msg) == normalise_message(msg.replace("0x7f3a2b1c00d0", "0x55aa01"))


# --------------------------------------------------------------------------------------------
# Frames


def test_user_frame_from_the_from_user_code_section() -> None:
    r = record("local-gb_fullgraph_print")
    assert r.user_frame is not None
    assert r.user_frame.file == "/home/user/repro/gb_fullgraph_print.py"
    assert (r.user_frame.line, r.user_frame.function) == (10, "forward")
    assert r.user_frame.code == 'print("intermediate", y.shape)'
    assert not r.user_frame.in_torch
    # the traceback itself only shows the call site in <module>
    assert r.torch_frame is not None and r.torch_frame.in_torch
    assert r.torch_frame.file.endswith("torch/_dynamo/eval_frame.py")


def test_user_frame_innermost_of_several_user_code_frames_in_pytest_output() -> None:
    r = record("local-gb_pytest_fullgraph")
    assert r.exception_type == "torch._dynamo.exc.Unsupported"
    assert r.user_frame is not None
    assert (r.user_frame.function, r.user_frame.line, r.user_frame.code) == ("helper", 9, "return x.tolist()")


def test_user_frame_skips_torch_site_packages_stdlib_and_frozen() -> None:
    text = ('Traceback (most recent call last):\n'
            '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
            '  File "/home/me/proj/train.py", line 40, in main\n    model(x)\n'
            '  File "/home/me/proj/model.py", line 12, in forward\n    return self.block(x)\n'
            '  File "/usr/lib/python3.11/contextlib.py", line 81, in inner\n    return func(*args, **kwds)\n'
            '  File "/home/me/.venv/lib/python3.11/site-packages/transformers/x.py", line 5, in f\n    g()\n'
            '  File "/home/me/.venv/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", line 9, in _fn\n'
            '    return fn(*args)\n'
            'KeyError: 3\n')
    r = parse_failure(text, 1)
    assert r is not None
    assert r.user_frame is not None and r.user_frame.file == "/home/me/proj/model.py"
    assert r.user_frame.code == "return self.block(x)"
    assert r.torch_frame is not None and r.torch_frame.function == "_fn"
    for path in ("<frozen runpy>", "/usr/lib/python3.11/contextlib.py", "/x/site-packages/torch/a.py",
                 "/x/dist-packages/numpy/a.py", "/tmp/torchinductor_me/ab/cabc.py", "<eval_with_key>.3"):
        assert not is_user_path(path), path
    assert is_user_path("/home/me/proj/model.py")


def test_inductor_error_with_compiler_output() -> None:
    r = record("local-bcf_inductor_cpp_compile_error")
    assert r.exception_type == "torch._inductor.exc.InductorError"
    assert r.chained == ["torch._inductor.exc.InductorError", "CppCompileError"]
    assert r.message is not None and len(r.message) <= 800
    assert r.message.startswith("CppCompileError: C++ compile error")
    assert "error: ‘compile’ was not declared in this scope" in r.message  # the compiler's own error line
    assert r.torch_frame is not None and r.torch_frame.function == "_run_compile_cmd"
    assert r.user_frame is not None and r.user_frame.file.endswith("bcf_inductor_cpp_compile_error.py")


def test_jupyter_style_traceback() -> None:
    r = record("bcf-005")
    assert r.exception_type == "InductorError"
    assert r.chained[:2] == ["InductorError", "CppCompileError"]
    assert r.torch_frame is not None and r.torch_frame.function == "_run_compile_cmd"
    assert r.torch_frame.line == 633
    r = record("di-011")  # header only: "IndexError      Traceback (most recent call last)"
    assert r.exception_type == "IndexError"


def test_log_prefixed_traceback() -> None:
    r = record("oth-002")  # E-level glog lines
    assert r.exception_type == "torch.fx.experimental.symbolic_shapes.ConstraintViolationError"
    assert r.message is not None and r.message.startswith("Constraints violated (seq_len)!")


# --------------------------------------------------------------------------------------------
# Chains, crashes, truncation


def test_chained_types_outermost_first() -> None:
    assert record("local-rc_recompile_limit").chained == [
        "torch._dynamo.exc.FailOnRecompileLimitHit", "torch._dynamo.exc.Unsupported"]
    assert record("local-exp_constraint_violation").chained == [
        "torch._dynamo.exc.UserError", "torch.fx.experimental.symbolic_shapes.ConstraintViolationError"]
    assert record("local-bcf_backend_raises").chained == [
        "torch._dynamo.exc.BackendCompilerFailed", "ReluCompileError"]


def test_segfault_with_faulthandler() -> None:
    r = record("local-rt_segfault_faulthandler")
    assert r.exception_type is None
    assert r.signal_name == "SIGSEGV"
    assert r.message == "Fatal Python error: Segmentation fault"
    # faulthandler prints the most recent call first; the innermost user frame is crash()
    assert r.user_frame is not None and (r.user_frame.function, r.user_frame.line) == ("crash", 15)
    assert r.signature.startswith("SIGSEGV")


def test_segfault_without_any_output() -> None:
    r = record("local-rt_segfault_silent")
    assert r.exception_type is None and r.signal_name == "SIGSEGV"
    assert r.signature.startswith("SIGSEGV#")
    assert parse_failure("", signal_name="SIGABRT") is not None


def test_segfault_seen_in_gdb_output() -> None:
    r = record("rt-008")
    assert r.signal_name == "SIGSEGV" and r.exception_type is None


def test_truncated_traceback_keeps_frames() -> None:
    r = record("bcf-011")  # vLLM-prefixed frames, no exception line
    assert r.exception_type is None
    assert r.torch_frame is not None and r.torch_frame.file.endswith("torch/_functorch/aot_autograd.py")


def test_exception_line_without_traceback() -> None:
    r = record("di-002")
    assert r.exception_type == "torch._dynamo.exc.InternalTorchDynamoError"
    assert r.chained == ["torch._dynamo.exc.InternalTorchDynamoError", "AttributeError"]


def test_no_failure() -> None:
    assert parse_failure("") is None
    assert parse_failure("all good\n", exit_code=0) is None
    assert parse_failure(BY_ID["local-gb_logs_only"]["text"], exit_code=0) is None


def test_nonzero_exit_without_exception_uses_the_last_line() -> None:
    r = record("local-acc_allclose_report")
    assert r.exception_type is None
    assert r.message == "MISMATCH between eager and compiled outputs"
    assert r.signature.startswith("exit 1: ")


@pytest.mark.parametrize("sample", LOCAL + LOCAL_GPU, ids=lambda d: d["id"])
def test_every_local_failure_parses(sample: dict) -> None:
    r = parse_failure(sample["text"], sample.get("exit_code"), sample.get("signal_name"))
    if sample.get("exit_code") == 0:
        return
    assert r is not None
    assert r.message is None or len(r.message) <= 800
    if not sample.get("signal_name") and sample["script_name"] != "acc_allclose_report.py":
        assert r.exception_type is not None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=2000), st.one_of(st.none(), st.integers(-20, 300)))
def test_parse_failure_never_raises(text: str, exit_code: int | None) -> None:
    r = parse_failure(text, exit_code)
    if r is not None:
        assert r.message is None or len(r.message) <= 800
        assert "#" in r.signature


def test_a_failure_raised_in_the_scripts_own_backend_names_that_backend() -> None:
    from pt2_bug_basher.analysis.failure import own_backend_frame, parse

    site = "/v/lib/python3.11/site-packages/torch"
    own = ("Traceback (most recent call last):\n"
           '  File "/home/u/repro.py", line 10, in <module>\n    f(x)\n'
           f'  File "{site}/_dynamo/output_graph.py", line 3119, in _call_user_compiler\n'
           "    compiled_fn = compiler_fn(gm, example_inputs)\n"
           f'  File "{site}/_dynamo/repro/after_dynamo.py", line 159, in __call__\n'
           "    compiled_gm = compiler_fn(gm, example_inputs)\n"
           '  File "/home/u/repro.py", line 6, in strict_backend\n    raise RuntimeError("no sin")\n'
           "torch._dynamo.exc.BackendCompilerFailed: backend='strict_backend' raised:\nRuntimeError: no sin\n")
    frame = own_backend_frame(parse(own))
    assert frame is not None and (frame.function, frame.line) == ("strict_backend", 6)
    # Inductor's own frames below the call, or a traceback cut in a library before the exception: not so
    inductor = own.replace('  File "/home/u/repro.py", line 6, in strict_backend\n',
                           f'  File "{site}/_inductor/compile_fx.py", line 6, in compile_fx\n')
    assert own_backend_frame(parse(inductor)) is None
    cut = own.split('  File "/home/u/repro.py", line 6')[0] + '  File "/usr/lib/python3.11/contextlib.py", line 81\n'
    assert own_backend_frame(parse(cut)) is None
    assert not [d["id"] for d in PUBLIC + LOCAL if own_backend_frame(parse(d["text"]))]  # none of the corpus is one


def test_a_paste_copied_with_its_line_numbers_is_read_without_them() -> None:
    from corpus_samples import TRAINING

    from pt2_bug_basher.analysis.failure import _unnumbered, parse

    text = next(d["text"] for d in TRAINING if d["id"] == "tu10b-tr-03")  # a Triton traceback, numbered 85..93
    assert text.startswith("85 ")
    parsed = parse(text)
    assert parsed.final_exc is not None and parsed.final_exc.type == "triton.runtime.autotuner.OutOfResources"
    assert [f.line for f in parsed.all_frames()][:2] == [114, 65]
    # numbers that are the program's own output, not one after another, stay
    printed = "Traceback (most recent call last):\n" + "".join(f"{n} items\n" for n in (8, 3, 12, 5, 7, 1)) + \
        "ValueError: bad count\n"
    assert parse(printed).final_exc.message == "bad count"
    assert _unnumbered(printed) == printed


def test_a_lone_exception_line_keeps_the_lines_that_continue_its_message() -> None:
    # Dynamo's fake-tensor run prints the op it ran, then the reason on the next line
    lone = ("torch._dynamo.exc.TorchRuntimeError: Failed running call_function <built-in function f>"
            "(*(FakeTensor(..., size=(s0,)),), **{}):\n"
            "Cannot call sizes() on tensor with symbolic sizes/strides\n")
    record = parse_failure(lone)
    assert record.exception_type == "torch._dynamo.exc.TorchRuntimeError"
    assert record.message is not None and record.message.endswith("\nCannot call sizes() on tensor with symbolic "
                                                                  "sizes/strides"), record.message
    # a blank line, a log line or a frame ends it
    for after in ("\n\nprint(done)\n", "\nI0101 10:00:00.000 1 torch/x.py:1] next\n",
                  '\n  File "/repo/a.py", line 3, in f\n'):
        cut = parse_failure("RuntimeError: one reason" + after)
        assert cut.message == "one reason", (after, cut.message)


# --------------------------------------------------------------------------------------------
# Whose code raised the final exception

_SITE = "/home/u/venv/lib/python3.11/site-packages"


def _tb(*frames: tuple[str, int, str], last: str) -> str:
    lines = ["Traceback (most recent call last):"]
    lines += [f'  File "{file}", line {line}, in {func}\n    pass' for file, line, func in frames]
    return "\n".join([*lines, last]) + "\n"


@pytest.mark.parametrize("frames,where,function", [
    pytest.param([("/home/u/repro.py", 12, "<module>"), ("/home/u/repro.py", 8, "project")], "program", "project",
                 id="an_op_called_from_the_script"),
    pytest.param([("/home/u/repro.py", 12, "<module>"), (f"{_SITE}/torch/nn/modules/module.py", 1775, "_call_impl"),
                  (f"{_SITE}/torch/nn/modules/linear.py", 125, "forward")], "program", "<module>",
                 id="torch_public_layer_passes_on_what_the_script_gave"),
    pytest.param([("/home/u/repro.py", 12, "<module>"), (f"{_SITE}/torch/utils/_pytree.py", 1130, "unflatten")],
                 "torch", "unflatten", id="deeper_in_torch"),
    pytest.param([("/home/u/repro.py", 12, "<module>"), (f"{_SITE}/torch/_dynamo/eval_frame.py", 1446, "_fn"),
                  ("<eval_with_key>.1", 6, "forward"), (f"{_SITE}/torch/__init__.py", 2279, "_assert")],
                 "compiled_code", "forward", id="torch_assert_in_an_fx_graph"),
    pytest.param([("/home/u/repro.py", 12, "<module>"),
                  ("/tmp/torchinductor_u/ab/cabcdef.py", 40, "call")], "compiled_code", "call",
                 id="inductor_output_code"),
])
def test_raised_in_names_whose_code_raised(frames, where, function) -> None:
    from pt2_bug_basher.analysis.failure import parse, raised_in

    found = raised_in(parse(_tb(*frames, last="RuntimeError: boom")))
    assert found is not None and found[0] == where and found[1].function == function, found


def test_a_script_function_called_by_the_compiled_code_is_told_from_one_the_script_called() -> None:
    from pt2_bug_basher.analysis.failure import compiled_callable_frame, parse

    eval_frame = f"{_SITE}/torch/_dynamo/eval_frame.py"
    by_compiled = _tb(("/home/u/repro.py", 16, "<module>"), (eval_frame, 1166, "compile_wrapper"),
                      ("/home/u/repro.py", 12, "wave"), (eval_frame, 1446, "_fn"), ("/home/u/repro.py", 7, "run"),
                      ("/home/u/repro.py", 3, "check"), last="RuntimeError: float32 is not supported")
    frame = compiled_callable_frame(parse(by_compiled))
    assert frame is not None and (frame.function, frame.line) == ("run", 7)
    # Dynamo's compile wrapper calling the function it compiles (a raise it ran without a graph), a module's
    # forward called by nn.Module, and a plain call: the script called it
    for frames in ([("/home/u/repro.py", 16, "<module>"), (eval_frame, 1166, "compile_wrapper"),
                    ("/home/u/repro.py", 9, "wave")],
                   [("/home/u/repro.py", 16, "<module>"), (f"{_SITE}/torch/nn/modules/module.py", 1775, "_call_impl"),
                    ("/home/u/repro.py", 9, "forward")],
                   [("/home/u/repro.py", 16, "<module>"), ("/home/u/repro.py", 9, "wave")]):
        assert compiled_callable_frame(parse(_tb(*frames, last="RuntimeError: boom"))) is None, frames


def test_a_program_that_exits_after_its_own_check_fails_the_same_way_under_the_launcher(tmp_path) -> None:
    """The launcher prints `PT2BB-COMPILED:` as the script ends; the failure is still the program's last line."""
    import subprocess
    import sys
    from pathlib import Path

    import pt2_bug_basher

    script = tmp_path / "exits.py"
    script.write_text("import sys\nimport torch\n\n"
                      "print(torch.compile(lambda x: x * 2, backend='eager')(torch.ones(3)))\n"
                      "print('WRONG RESULT: Greatest relative difference: 0.5 at index (1,)', file=sys.stderr)\n"
                      "sys.exit(3)\n")
    launcher = Path(pt2_bug_basher.__file__).parent / "_probes" / "launcher.py"
    plain, launched = (subprocess.run([sys.executable, *argv, str(script)], capture_output=True, text=True,
                                      timeout=120, cwd=tmp_path) for argv in ([], [str(launcher), "--"]))
    assert launched.stderr.strip().splitlines()[-1].startswith("PT2BB-COMPILED:"), launched.stderr
    records = [parse_failure(r.stdout + r.stderr, r.returncode) for r in (plain, launched)]
    assert records[0] is not None and records[1] is not None
    assert records[0].message == records[1].message == "WRONG RESULT: Greatest relative difference: 0.5 at index (1,)"
    assert records[0].signature == records[1].signature
    from pt2_bug_basher.analysis.verdict import tail_lines

    # the tail an agent reads ends with the program's words too
    assert tail_lines(launched.stderr)[-1] == records[0].message, tail_lines(launched.stderr)


COMPARED = '''\
import torch


def check(name, got, want):
    torch.testing.assert_close(got, want)


def run(form):
    x = torch.ones(3, requires_grad=True)
    out = x * 2
    if form == "literal":
        torch.testing.assert_close((out, x * 3), (out, x * 4))
    elif form == "named":
        got = [out.detach(), x.detach() + 1]
        torch.testing.assert_close(got, [out.detach(), x.detach()])
    elif form == "helper":
        check("both", (out, x.sum()), (out, x.sum() + 1))
    else:
        torch.testing.assert_close(torch.stack([out, x]), torch.stack([out, x + 1]))


if __name__ == "__main__":
    import sys

    run(sys.argv[1])
'''


@pytest.mark.parametrize(("form", "line", "compared"), [
    ("literal", 12, "item [1] is `x * 3`"), ("named", 15, "item [1] is `x.detach() + 1`"),
    # inside the helper the sequence is a parameter: its caller wrote the literal
    ("helper", 17, "item [1] is `x.sum()`"), ("stacked", 19, None),
])
def test_the_item_an_assertion_names_is_read_from_the_script(tmp_path, form, line, compared) -> None:
    import subprocess
    import sys

    from pt2_bug_basher.analysis.failure import compared_item, mismatched_item, parse

    script = tmp_path / "compares.py"
    script.write_text(COMPARED)
    run = subprocess.run([sys.executable, str(script), form], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 1 and f'compares.py", line {line}' in run.stderr, run.stderr
    said = compared_item(parse(run.stderr), run.stderr)
    if compared is None:  # one tensor compared: no item named
        assert said is None and mismatched_item(run.stderr) is None
    else:
        assert said == f"{compared} (compares.py:{line})", said


@pytest.mark.anyio
async def test_run_with_logs_says_which_compared_item_differs(server, workspace) -> None:
    import sys

    from mcp import Client

    script = workspace / "pair.py"
    script.write_text("import torch\n\n\ndef f(x):\n    return x * 2, x + 1\n\n\n"
                      "out, shifted = torch.compile(f, backend='eager')(torch.ones(3))\n"
                      "torch.testing.assert_close((out, shifted), (out, shifted + 1))\n")
    async with Client(server) as client:
        env = await client.call_tool("check_env", {"python": sys.executable})
        run = await client.call_tool("run_with_logs", {"case_id": env.structured_content["case_id"],
                                                       "script": str(script), "repeat": 1})
    failure = run.structured_content["failure"]
    assert failure["category"] == "accuracy", failure
    assert failure["compared"] == "item [1] is `shifted` (pair.py:9)", failure
