"""Who wrote the FX-generated line that raised: the spectrum probe's `--fx-writers` record (real torch, real
generated code), the suspects read from records of two real FX code-generation mutants, and localize naming
the mutated function of a code-generation bug planted in a torch checkout."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pt2_bug_basher.analysis.fx_code import failing_lines, fx_writer_suspects, generated_code_note, raised_in_fx_code

PROBES = Path(__file__).resolve().parents[1] / "server" / "pt2_bug_basher" / "_probes"
DATA = Path(__file__).parent / "data" / "fx_code"
EMIT_NODE = "CodeGen._gen_python_code.<locals>.emit_node"

# a graph built by hand whose generated code raises on its second statement, or is called with one
# argument too many
HAND_BUILT = textwrap.dedent('''\
    import operator
    import sys

    import torch
    import torch.fx

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    doubled = graph.call_function(operator.mul, (x, 2))
    bad = graph.call_function(operator.add, (doubled, "text"))
    graph.output(bad)
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    if sys.argv[1:] == ["extra"]:
        module(torch.ones(2), torch.ones(2))
    else:
        module(torch.ones(2))
    ''')


def _probe(tmp_path: Path, args: list[str], preloaded: bool) -> tuple[subprocess.CompletedProcess, dict]:
    script = tmp_path / "hand_built.py"
    script.write_text(HAND_BUILT)
    out = tmp_path / "fx.json"
    probe = ["--out", str(out), "--fx-writers", "--", str(script), *args]
    # preloaded: torch.fx.graph is imported before the probe starts, as in a fork server's child
    argv = ([sys.executable, "-c", "import sys, torch.fx.graph; sys.path.insert(0, sys.argv.pop(1)); "
             "import spectrum; sys.exit(spectrum.main(sys.argv[1:]))", str(PROBES), *probe] if preloaded else
            [sys.executable, str(PROBES / "spectrum.py"), *probe])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    return done, json.loads(out.read_text())["fx_code"]


@pytest.mark.parametrize("preloaded", [False, True])
def test_the_probe_records_the_generated_code_and_its_writers(tmp_path: Path, preloaded: bool):
    done, report = _probe(tmp_path, [], preloaded)
    assert done.returncode == 1 and "TypeError" in done.stderr, done.stderr[-2000:]
    # an op that raised on a statement FX wrote as it writes every call: localize asks for no such run ...
    assert not raised_in_fx_code(done.stderr)
    # ... but one that used a None there does
    assert raised_in_fx_code(done.stderr.replace("'Tensor' and 'str'", "'Tensor' and 'NoneType'"))
    # FX re-raises without the generated code's frames: they are read from the traceback it printed
    assert report["failing"] == []
    failing = failing_lines(report, done.stderr)
    assert failing and failing[0]["file"].startswith("<eval_with_key>"), done.stderr[-2000:]
    assert failing[0]["text"].strip().startswith("add = mul + 'text'"), failing
    graph = report["graphs"][-1]
    assert graph["src"].split("\n")[failing[0]["line"] - 1].strip() == failing[0]["text"].strip()
    # each fragment with the torch.fx function and line that wrote it: the statement by emit_node, the def by
    # gen_fn_def, and the freeing `mul = None` by delete_unused_values
    writers = {(f[1], f[5]) for f in graph["fragments"] if f[4].strip().startswith("add = mul + 'text'")}
    assert (EMIT_NODE, "append") in writers, writers
    assert any(f[1] == "CodeGen.gen_fn_def" and f[4].startswith("def forward(self, x)") for f in graph["fragments"])
    assert any(f[1].endswith("delete_unused_values") and "mul = None" in f[4] for f in graph["fragments"])
    # an op that raised on a statement FX wrote as it writes every call: the graph is wrong, not its code
    assert fx_writer_suspects(report, done.stderr) == []
    note = generated_code_note(report, done.stderr)
    assert note is not None and failing[0]["file"] in note and "add = mul + 'text'" in note
    # without the printed traceback, nothing says which line raised
    assert generated_code_note(report) is None


def test_the_probe_names_who_wrote_the_def_a_call_could_not_bind(tmp_path: Path):
    done, report = _probe(tmp_path, ["extra"], preloaded=False)
    assert "forward() takes 2 positional arguments but 3 were given" in done.stderr, done.stderr[-2000:]
    assert raised_in_fx_code(done.stderr)
    assert report["failing"] == [] and failing_lines(report, done.stderr) == []
    suspects = fx_writer_suspects(report, done.stderr)
    assert [s.function for s in suspects] == ["CodeGen.gen_fn_def"], suspects
    assert "def forward(self, x)" in suspects[0].why
    assert generated_code_note(report, done.stderr) is None


def test_an_error_outside_generated_code_asks_for_no_record():
    assert not raised_in_fx_code('Traceback (most recent call last):\n  File "/r.py", line 3, in <module>\n'
                                 '    f(1)\nTypeError: f() takes 0 positional arguments but 1 was given\n')
    assert not raised_in_fx_code('Traceback (most recent call last):\n  File "/r.py", line 3, in <module>\n'
                                 '    g()\nValueError: bad\n')


@pytest.mark.parametrize(("record", "writers"), [
    # delete_unused_values freed `out` one statement early (`== 1` for `== 0`): the next line adds to a None
    ("none_set_too_early", ["CodeGen._gen_python_code.<locals>.delete_unused_values"]),
    # gen_fn_def lost its `self`: the compiled call passes one argument more than the def takes
    ("def_without_self", ["CodeGen.gen_fn_def"]),
])
def test_recorded_code_generation_mutants_name_the_mutated_writer_first(record: str, writers: list[str]):
    report = json.loads((DATA / f"{record}.json").read_text())
    suspects = fx_writer_suspects(report)
    assert [s.function for s in suspects] == writers, [(s.function, s.why) for s in suspects]
    assert all(s.file == "torch/fx/graph.py" and s.evidence == ["fx_codegen"] for s in suspects)


def test_a_record_without_the_code_that_raised_names_no_writer():
    report = json.loads((DATA / "none_set_too_early.json").read_text())
    assert fx_writer_suspects({**report, "graphs": []}) == []
    # another graph's code (the failing line is not at its line number): not read
    other = [{**g, "src": g["src"].replace("out_1 = out + 1", "out_1 = out + 2")} for g in report["graphs"]]
    assert fx_writer_suspects({**report, "graphs": other}) == []
    # the fragments that wrote the failing line are gone: nothing is guessed
    lost = [{**g, "fragments": [f for f in g["fragments"] if "None" not in f[4] and "out_1" not in f[4]]}
            for g in report["graphs"]]
    assert fx_writer_suspects({**report, "graphs": lost}) == []


DELETE_FILE = "torch/fx/graph.py"
DELETE_OLD = "            if len(user.users.keys()) == 0:\n"
DELETE_NEW = "            if len(user.users.keys()) == 1:\n"
DELETE_REPRO = textwrap.dedent('''\
    import torch


    def f(x):
        out = x * 3
        out = out + 1
        return out - 2


    if __name__ == "__main__":
        x = torch.randn(4)
        torch.testing.assert_close(torch.compile(f, backend="eager")(x), f(x))
    ''')


@pytest.mark.slow
@pytest.mark.anyio
async def test_localize_names_the_fx_codegen_function_that_freed_a_value_too_early(tmp_path: Path):
    """FX's code generation frees a value one use too early: the graph's generated code adds to a None. No
    torch frame is on the stack and the commit is upstream; the record of who wrote the generated code names
    the function that wrote the early `= None`."""
    from planted_bugs import PlantedBug, localize_upstream
    from torch_checkout import build_torch_checkout

    made = build_torch_checkout(tmp_path)
    bug = PlantedBug(name="fx_delete", file=DELETE_FILE, old=DELETE_OLD, new=DELETE_NEW, repro=DELETE_REPRO,
                     layer="Dynamo", guilty="CodeGen._gen_python_code.<locals>.delete_unused_values",
                     what="frees a value while it still has a user", commit_message="fx: codegen tidy")
    data = await localize_upstream(made.root, made.checkout, made.python, bug, "repro_fx.py")
    top = data["suspects"][0]
    assert (top["file"], top["function"]) == (DELETE_FILE, bug.guilty), data["suspects"][:5]
    assert "fx_codegen" in top["evidence"] and "= None` into the code FX generated" in top["why"], top
    source = (made.checkout / DELETE_FILE).read_text().splitlines()
    assert "body.append" in source[top["line"] - 1], source[top["line"] - 1]
    assert any("raised in code FX generated (<eval_with_key>" in n for n in data["notes"]), data["notes"]
