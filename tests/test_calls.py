"""Tool calls written in text: found, parsed and checked against the tools' input schemas, and every
call the server itself writes (step table, gates, category diagnostics) passes the check."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client

from pt2_bug_basher.analysis.classify import CATEGORIES
from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.case.workflow import SPEC, STEPS, Workflow, stopped_main, stopped_own_backend, stopped_user_error
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import GateClosed
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.mcp_server.calls import (
    CallError,
    check_result,
    check_text,
    find_calls,
    input_schemas,
    parse_call,
)
from pt2_bug_basher.mcp_server.server import create_server
from pt2_bug_basher.playbooks import PLAYBOOKS, diagnostic_call


@pytest.fixture(scope="module")
def schemas(tmp_path_factory):
    root = tmp_path_factory.mktemp("calls")
    return anyio.run(input_schemas, create_server(ServerConfig(root / "state", root, (root,))))


def problems(text: str, schemas) -> list[str]:
    return [p.message for p in check_text(text, schemas)]


# --------------------------------------------------------------------------------------------
# Finding and parsing


def test_calls_are_found_in_prose_with_nesting_and_quotes():
    text = ('Step 6: run_with_logs(case_id="c", script="a (b).py", env={"A": "x)"}) then '
            "review_changes(case_id='c'); torch.compile(fullgraph=True) and print(x) are not tool calls.")
    assert list(find_calls(text, {"run_with_logs", "review_changes"})) == [
        'run_with_logs(case_id="c", script="a (b).py", env={"A": "x)"})', "review_changes(case_id='c')"]


def test_literals_python_and_json_and_slots():
    call = parse_call('run_tests(case_id="c", tests=["<registered test>"], run_nearby=true, k=None, '
                      "timeout_s=-1.5, where='repo')")
    assert call.tool == "run_tests"
    assert call.arguments == {"case_id": "c", "tests": ["<registered test>"], "run_nearby": True, "k": None,
                              "timeout_s": -1.5, "where": "repo"}
    assert parse_call("run_with_logs(logs=<preset>)").arguments == {"logs": "<preset>"}


@pytest.mark.parametrize("snippet,needle", [
    ("register_test(...)", "`...` stands for arguments"),
    ('make_worktree(..., ref="<branch>")', "`...` stands for arguments"),
    ("get_workflow(case_id)", "positional argument"),
    ("check_env(conda_env=NAME)", "not a literal value"),
    ('run_tests(**{"case_id": "c"})', "**"),
    ('run_tests(case_id="c"', "does not parse"),
    ("run_tests(case_id=f(x))", "not a literal value"),
])
def test_what_is_not_a_call(snippet, needle):
    with pytest.raises(CallError, match=needle.replace("*", r"\*").replace("(", r"\(")):
        parse_call(snippet)


# --------------------------------------------------------------------------------------------
# Checking against the schemas


def test_good_calls_pass(schemas):
    for text in [
        'run_with_logs(case_id="c", script="<repro.py>", repeat=2)',
        'run_with_logs(case_id="c", script="/x/r.py", logs="unknown", env={"A": "1"}, args=["--n", "3"])',
        'run_tests(case_id="c", run_nearby=true) and review_changes(case_id="c")',
        'make_worktree(case_id="c", action="<create or remove>", force=True)',
        'waive_step(case_id="c", step="<step>", reason="...")',
        "get_workflow()",
        'minify(case_id="c", mode="fx", after="dynamo", budget_s=120)',
    ]:
        assert problems(text, schemas) == [], text


@pytest.mark.parametrize("text,needle", [
    ('run_test(case_id="c")', "no tool 'run_test' (did you mean run_tests?)"),
    ('localize(case_id="c", scrpit="r.py")', "takes no argument 'scrpit'"),
    ('localize(script="r.py")', "'case_id' is a required property"),
    ('run_with_logs(case_id="c", script="r.py", repeat="2")', "repeat: '2' is not of type 'integer'"),
    ('run_with_logs(case_id="c", script="r.py", timeout_s=<seconds>)', "placeholder, but the tool takes number"),
    ('run_with_logs(case_id="c", script="r.py", logs="bogus")', "logs='bogus' is refused"),
    ('minify(case_id="c", mode="fxx")', "mode='fxx' is refused"),
    ('waive_step(case_id="c", step="reducing", reason="x")', "'reducing' is not one of"),
    ('make_worktree(case_id="c", action="delete")', "'delete' is not one of"),
])
def test_bad_calls_say_why(schemas, text, needle):
    found = problems(text, schemas)
    assert any(needle in p for p in found), found


def test_a_result_check_names_the_tool_the_field_and_the_call(schemas):
    result = {"next_step": "fine: get_workflow()", "nested": [{"diagnostic": 'localize(case_id="c", x=1)'}],
              "stderr": "run_tests() is PyTorch's, and this field is not checked"}
    (line,) = check_result("classify_error", result, schemas)
    assert line.startswith("classify_error result, field nested[0].diagnostic: localize(case_id=\"c\", x=1) -> ")
    assert "takes no argument 'x'" in line


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["case_id", "script", "k", "cwd"]), st.text(), min_size=1),
       st.text(max_size=40))
def test_format_call_round_trips_any_text(arguments, prose):
    written = format_call("run_tests", **arguments)
    assert parse_call(written).arguments == arguments
    assert written in list(find_calls(f"{prose} {written}", {"run_tests"}))


# --------------------------------------------------------------------------------------------
# What the server writes


def test_the_step_table_and_the_stop_message_are_valid_calls(schemas):
    for spec in STEPS:
        if spec.observed:
            assert problems(spec.opening("case-1"), schemas) == [], spec.step
    assert problems(stopped_main("main", "case-1"), schemas) == []
    for script in ('/tmp/a "quoted" dir/répro.py', "/tmp/it's here/repro.py"):  # quotes, spaces, non-ASCII
        for text in (stopped_user_error(script, "case-1"), stopped_own_backend(script, "my_backend", "case-1")):
            assert problems(text, schemas) == [], text
            calls = [parse_call(c) for c in find_calls(text, {"run_with_logs"})]
            scripts = [c.arguments["script"] for c in calls if c.tool == "run_with_logs"]
            assert scripts == [script], text


def test_gate_refusals_name_valid_calls(workspace, schemas):
    store = Store(workspace / "state")
    case = store.create_case(str(workspace / "repo"), sys.executable, {})
    flow = Workflow(store, case.case_id, lambda: "tree")
    for tool in (ToolName.localize, ToolName.collect_debug_artifacts, ToolName.celebrate):
        with pytest.raises(GateClosed) as refused:
            flow.require(tool)
        message = str(refused.value)
        assert "Next call: " in message and problems(message, schemas) == [], message
    assert SPEC[Step.environment].waivable is False


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_category_diagnostic_is_a_valid_call(schemas, category):
    for case_id, script in ((None, None), ("case-1", '/tmp/a "quoted" \\ path.py')):
        call = diagnostic_call(category, case_id, script)
        assert problems(call, schemas) == [], call
        assert parse_call(call).tool == PLAYBOOKS[category].diagnostic.tool.value


@pytest.mark.anyio
async def test_classify_error_on_an_unknown_failure_recommends_a_call_the_server_takes(server, schemas):
    async with Client(server) as client:
        result = await client.call_tool("classify_error", {"text": "something odd happened\nexit 3\n"})
    data = result.structured_content
    assert data["category"] == "unknown"
    assert problems(data["diagnostic"], schemas) == [], data["diagnostic"]
    assert parse_call(data["diagnostic"]).tool == "localize"
    # and the unknown category's preset is one run_with_logs takes
    assert problems('run_with_logs(case_id="c", script="r.py", logs="unknown")', schemas) == []


@pytest.mark.anyio
async def test_classify_error_says_a_learned_guess_is_a_guess_and_its_calls_are_accepted(server, schemas):
    # a rich-rendered recompile-stance traceback (tests/data/corpus, scripts_tuning/) cut above its exception
    # line: no rule places it, the learned guess does
    from corpus_samples import TUNING

    text = next(d["text"] for d in TUNING if d["id"] == "tu-local-rich_rc_stance")
    cut = text[:text.rfind("\n", 0, text.rfind("RuntimeError: Detected recompile"))]
    async with Client(server) as client:
        result = await client.call_tool("classify_error", {"text": cut})
    data = result.structured_content
    assert data["category"] == "recompile" and data["confidence"] <= 0.2
    assert {e["rule"] for e in data["evidence"]} == {"fallback:learned"}
    assert data["next_step"].startswith("The category is a guess (confidence ")
    assert "it holds no exception line" in data["next_step"], data["next_step"]
    assert problems(data["diagnostic"], schemas) == [], data["diagnostic"]
    assert data["diagnostic"] in data["next_step"]
    assert problems(data["next_step"], schemas) == [], data["next_step"]
    # an exception no rule knows, raised inside torch: the guess says which exception it could not place
    in_torch = ('  File "/venv/lib/python3.11/site-packages/torch/fx/graph.py", line 3, in double\n'
                "ValueError: double() cannot take 21\n")
    async with Client(server) as client:
        raised = (await client.call_tool("classify_error", {"text": in_torch})).structured_content
    assert "no rule knows its exception (ValueError)" in raised["next_step"], raised
    # a lone exception line does not say whose code raised it: not guessed at; reproduce first (the compile-off
    # run tells), with no category's guide
    for line in ("RuntimeError: expected scalar type Float but found Half in aten::mm\n",
                 "RuntimeError: shape '[4, 8]' is invalid for input of size 24\n"):
        async with Client(server) as client:
            lone = (await client.call_tool("classify_error", {"text": line})).structured_content
        assert lone["category"] == "unknown", lone
        assert lone["diagnostic"] == 'run_with_logs(case_id="<case_id>", script="<repro.py>", repeat=2)', lone
        assert lone["next_step"].startswith("A lone exception line does not say whose code raised it"), lone
        assert lone["guide"]["config_knobs"] == [] and lone["guide"]["source_files"] == [], lone["guide"]
        assert lone["guide"]["log_preset"] is None and problems(lone["next_step"], schemas) == [], lone


@pytest.mark.anyio
async def test_classify_error_names_the_pasted_tracebacks_environment_in_a_call_the_server_takes(server, schemas):
    site = Path(sysconfig.get_paths()["purelib"])  # this interpreter's own site-packages: on this machine
    text = (f'  File "{site}/torch/_inductor/compile_fx.py", line 1040, in compile_fx_inner\n'
            "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nRuntimeError: boom\n")
    async with Client(server) as client:
        result = await client.call_tool("classify_error", {"text": text})
    data = result.structured_content
    assert data["category"] == "backend_compiler_failed"
    assert 'check_env(python="' in data["next_step"], data["next_step"]
    assert problems(data["next_step"], schemas) == [], data["next_step"]


def test_a_pasted_tracebacks_environment_is_named_only_when_its_torch_is_here(tmp_path):
    from pt2_bug_basher.execution.environment import interpreter_of_frames

    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    torch_dir = prefix / "lib" / "python3.11" / "site-packages" / "torch"
    frame = str(torch_dir / "_dynamo" / "symbolic_convert.py")
    # the environment exists, the pasted traceback's torch does not (a system path of another machine)
    assert interpreter_of_frames([frame]) is None
    torch_dir.mkdir(parents=True)
    (torch_dir / "__init__.py").write_text("")
    assert interpreter_of_frames([frame]) == prefix / "bin" / "python"


@pytest.mark.anyio
async def test_classify_error_names_similar_public_reports(server, schemas):
    from corpus_samples import HELDOUT

    sample = next(d for d in HELDOUT if d["id"] == "ho-ds-01")
    async with Client(server) as client:
        result = await client.call_tool("classify_error", {"text": sample["text"]})
    reports = result.structured_content["similar_reports"]
    assert reports[0]["url"] == sample["url"] and reports[0]["label"] == sample["label"]
    # word for word a known report: the next step sends the agent to it first, then goes on as usual
    next_step = result.structured_content["next_step"]
    assert next_step.startswith(f"This text reads almost word for word like {sample['url']} (similarity 1.00")
    assert problems(next_step, schemas) == [], next_step
    # three printed tensors read like any three printed tensors: named as similar, not as the same report
    printed = next(d for d in HELDOUT if d["id"] == "ho6-acc-02")
    async with Client(server) as client:
        result = await client.call_tool("classify_error", {"text": printed["text"]})
    data = result.structured_content
    assert data["similar_reports"] and data["similar_reports"][0]["similarity"] >= 0.9
    assert "word for word" not in data["next_step"]
    # functionalization's refusal reaches the user wrapped as the backend's failure: the guide reads AOTAutograd
    refusal = ("RuntimeError: While executing unfold, functionalization encountered a tensor being mutated that has "
               "internal overlap.\n")
    async with Client(server) as client:
        refused = (await client.call_tool("classify_error", {"text": refusal})).structured_content
    guide = refused["guide"]
    # ... and it is a refusal by design, with the script's workaround: the guide names the files that implement
    # the refusal, no compiler knob, and the compiler is debugged only if the view does not overlap
    assert guide["layer"] == "AOTAutograd" and guide["config_knobs"] == [] and guide["minify_level"] is None, guide
    assert guide["source_files"] == ["torch/_subclasses/functional_tensor.py",
                                     "torch/_functorch/_aot_autograd/functional_utils.py"], guide
    assert "test/test_functionalization.py" in guide["test_files"], guide
    said = refused["next_step"]
    assert said.startswith("Functionalization refuses this by design"), said
    assert "clone()" in said and problems(said, schemas) == []
    assert said.index("Only if the script's view does not overlap, debug the compiler: open a case") < said.index(
        refused["diagnostic"]), said
    assert "fixed in a newer torch" not in said


@pytest.mark.anyio
async def test_classify_error_says_what_an_unbacked_symbol_is(server, schemas):
    fake_run = ("torch._dynamo.exc.TorchRuntimeError: Failed running call_function <built-in function getitem>"
                "(*(FakeTensor(..., size=(s0, 4)), slice(None, u0, None)), **{}):\n"
                "Cannot call sizes() on tensor with symbolic sizes/strides\n")
    async with Client(server) as client:
        data = (await client.call_tool("classify_error", {"text": fake_run})).structured_content
        backed = (await client.call_tool("classify_error", {
            "text": fake_run.replace("u0", "s1")})).structured_content
    assert data["category"] == "dynamic_shapes", data
    assert data["next_step"].startswith("u0 is an unbacked symbol: a size or value the program reads from data")
    assert "torch._check(" in data["next_step"] and problems(data["next_step"], schemas) == []
    # a backed size (s1) is no unbacked symbol
    assert backed["category"] == "dynamic_shapes" and "unbacked" not in backed["next_step"], backed


@pytest.mark.anyio
async def test_classify_error_says_when_a_category_rests_only_on_where_a_traceback_stops(server, schemas):
    cut = ('  File "/site/torch/_dynamo/symbolic_convert.py", line 1203, in run\n    while self.step():\n'
           '  File "/site/torch/_dynamo/variables/builtin.py", line 1011, in call_function\n')
    async with Client(server) as client:
        data = (await client.call_tool("classify_error", {"text": cut})).structured_content
    assert {e["rule"] for e in data["evidence"]} == {"frames:dynamo_trace"}, data["evidence"]
    said = data["next_step"]
    assert said.startswith("The category rests only on where the traceback stops (frames:dynamo_trace"), said
    assert "for a graph break and for a Dynamo internal error alike" in said and problems(said, schemas) == []


@pytest.mark.anyio
async def test_a_pasted_tracebacks_suspect_lines_are_said_to_be_its_torchs(server):
    site = "/elsewhere/lib/python3.10/site-packages/torch/_inductor/lowering.py"
    cut = (f'  File "{site}", line 412, in wrapped\n    out = decomp_fn(*args, **kwargs)\n'
           f'  File "{site}", line 6120, in pow_recursive\n')
    async with Client(server) as client:
        data = (await client.call_tool("classify_error", {"text": cut})).structured_content
    [top, *_] = data["suspects"]
    assert (top["function"], top["line"]) == ("pow_recursive", 6120), top
    assert top["why"].endswith("line 6120 of the pasted traceback's torch, which may differ from this checkout's"), top
