"""Where Dynamo raised the graph break an error reports, and what its guarding condition calls: on a real graph
break of the installed torch, and on a small torch tree whose sites are known."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from mcp import Client

from pt2_bug_basher.analysis.break_sites import GraphBreak, break_site_suspects, break_sites, graph_breaks

COND_OF_AN_OBJECT = textwrap.dedent('''\
    import torch


    class Box:
        pass


    def f(x):
        return torch.cond(x.sum() > 0, lambda t, b: t.cos(), lambda t, b: t.sin(), (x, Box()))


    torch.compile(f, backend="eager", fullgraph=True)(torch.randn(3))
    ''')

SITES = textwrap.dedent('''\
    from .helpers import all_tensors


    def unimplemented(gb_type, context, explanation, hints):
        raise RuntimeError(gb_type)


    class Variable:
        def is_plain(self):
            return True

        def call(self, args):
            if not all_tensors(args) and len(args) > 1:
                unimplemented(gb_type="mixed arguments", context="", explanation="Only tensors.", hints=[])
            if self.is_plain():
                return args
            else:
                unimplemented(gb_type="not plain", context="", explanation="Plain only.", hints=[])
            # "unused break" is named here only in a comment
    ''')
HELPERS = textwrap.dedent('''\
    def all_tensors(args):
        return all(a is not None for a in args)
    ''')


def _tree(tmp_path: Path) -> Path:
    torch_dir = tmp_path / "torch"
    (torch_dir / "_dynamo" / "variables").mkdir(parents=True)
    (torch_dir / "__init__.py").write_text("")
    (torch_dir / "_dynamo" / "__init__.py").write_text("")
    (torch_dir / "_dynamo" / "variables" / "__init__.py").write_text("")
    (torch_dir / "_dynamo" / "variables" / "sites.py").write_text(SITES)
    (torch_dir / "_dynamo" / "variables" / "helpers.py").write_text(HELPERS)
    return torch_dir


def _report(gb_type: str, explanation: str) -> str:
    return ("Traceback (most recent call last):\n  File \"/r.py\", line 3, in <module>\n    f(x)\n"
            f"torch._dynamo.exc.Unsupported: {gb_type}\n  Explanation: {explanation}\n  Hint: none\n")


def test_a_real_graph_break_names_the_predicate_that_decided_it_then_its_site(tmp_path: Path):
    script = tmp_path / "cond_box.py"
    script.write_text(COND_OF_AN_OBJECT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "UncapturedHigherOrderOpError" in done.stderr, done.stderr[-2000:]
    assert graph_breaks(done.stderr) == [GraphBreak(
        "torch.cond: improper operands contents",
        "Expected `operands` to be a list/tuple of pytrees that only consists of tensor leaves.")]
    torch_dir = Path(torch.__file__).parent
    suspects = break_site_suspects(done.stderr, torch_dir)
    assert [(s.file, s.function) for s in suspects] == [
        ("torch/_dynamo/variables/higher_order_ops.py", "only_consist_of"),
        ("torch/_dynamo/variables/higher_order_ops.py", "CondHigherOrderVariable._call_function")], suspects
    source = (torch_dir.parent / suspects[0].file).read_text().splitlines()
    assert source[suspects[0].line - 1].startswith("def only_consist_of("), suspects[0]
    assert "unimplemented(" in "\n".join(source[suspects[1].line - 3:suspects[1].line]), suspects[1]
    assert all(s.evidence == ["graph_break"] for s in suspects)
    assert "`not only_consist_of(operands" in suspects[0].why and "torch.cond: improper operands" in suspects[0].why


def test_the_condition_is_read_as_written_and_negated_in_an_else(tmp_path: Path):
    torch_dir = _tree(tmp_path)
    mixed = break_sites(GraphBreak("mixed arguments", "Only tensors."), torch_dir)
    assert len(mixed) == 1 and mixed[0].function == "Variable.call" and mixed[0].file.endswith("variables/sites.py")
    assert mixed[0].condition == "not all_tensors(args) and len(args) > 1"
    # followed through the module's import; len() decides nothing of Dynamo's own
    assert mixed[0].deciders == (("torch/_dynamo/variables/helpers.py", 1, "all_tensors"),)
    plain = break_sites(GraphBreak("not plain", "Plain only."), torch_dir)
    assert plain[0].condition == "not (self.is_plain())"
    assert plain[0].deciders == (("torch/_dynamo/variables/sites.py", 9, "Variable.is_plain"),)
    suspects = break_site_suspects(_report("not plain", "Plain only."), torch_dir)
    assert [s.function for s in suspects] == ["Variable.is_plain", "Variable.call"]
    # named only in a comment, or nowhere: no site
    assert break_sites(GraphBreak("unused break", "x"), torch_dir) == []
    assert break_site_suspects(_report("no such break", "x"), torch_dir) == []


def test_only_the_last_traceback_s_graph_break_counts(tmp_path: Path):
    torch_dir = _tree(tmp_path)
    logged = ("Graph break in user code at /r.py:2\nGraph Break Reason: x\nmixed arguments\n"
              "  Explanation: Only tensors.\n")
    final = _report("not plain", "Plain only.")
    assert [g.gb_type for g in graph_breaks(logged + final)] == ["not plain"]
    assert [s.function for s in break_site_suspects(logged + final, torch_dir)] == ["Variable.is_plain",
                                                                                     "Variable.call"]
    assert graph_breaks("Traceback (most recent call last):\nValueError: bad\n") == []
    assert break_site_suspects(final, None) == [] and break_site_suspects(final, tmp_path / "missing") == []


@pytest.mark.slow
@pytest.mark.anyio
async def test_localize_reads_dynamo_s_internal_frames_and_the_graph_break_site(tmp_path: Path):
    """Dynamo prints the graph break without its own frames; localize reruns it with TORCHDYNAMO_VERBOSE=1 and
    names the predicate, the site, and the frames Dynamo had left out."""
    from pt2_bug_basher.case.config import ServerConfig
    from pt2_bug_basher.mcp_server.server import create_server
    from pt2_bug_basher.steps.localize import INTERNAL_NOTE

    (tmp_path / "cond_box.py").write_text(COND_OF_AN_OBJECT)
    config = ServerConfig(state_dir=tmp_path / "state", default_repo=tmp_path, allowed_roots=(tmp_path,))
    async with Client(create_server(config)) as client:
        env = await client.call_tool("check_env", {"python": sys.executable, "repo": str(tmp_path)})
        case_id = env.structured_content["case_id"]
        run = await client.call_tool("run_with_logs", {"case_id": case_id, "script": "cond_box.py"})
        assert run.structured_content["reproduced"], run.structured_content
        result = await client.call_tool("localize", {"case_id": case_id, "bisect_budget_s": 0})
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert INTERNAL_NOTE in data["notes"], data["notes"]
    named = [(s["function"], s["evidence"]) for s in data["suspects"]]
    # the site is the innermost of the internal frames the printed traceback did not have: one suspect
    assert named[:3] == [("only_consist_of", ["graph_break"]),
                         ("CondHigherOrderVariable._call_function", ["graph_break"]),
                         ("wrapped_call_function", ["exception"])], named
    assert "also the traceback's innermost torch frame of" in data["suspects"][1]["why"], data["suspects"][1]
