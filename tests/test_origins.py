"""Where a None came from: the spectrum probe's record of the Nones compiler functions made before an exception,
which of them become suspects, and localize naming the function whose None a runtime wrapper called."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pt2_bug_basher.analysis.suspects import MAX_NONE_ORIGINS, broken_invariant, none_origin_suspects, none_used

PROBES = Path(__file__).resolve().parents[1] / "server" / "pt2_bug_basher" / "_probes"

# a stand-in for torch's compiler: the probe records only functions under torch/<compiler package>/
FAKE_MODULE = textwrap.dedent('''\
    def lookup(table, key):
        if key in table:
            return table[key]


    def build(items):
        items.append(1)
        if items:
            return


    def passthrough(value):
        return value


    def optional(key) -> "int | None":
        return None


    def explicit():
        return None


    def late(flag):
        if flag:
            return 1


    def use(value):
        return value.upper()


    def trace(table):
        return use(lookup(table, "b"))
    ''')

FAKE_SCRIPT = textwrap.dedent('''\
    import torch._dynamo.mod as m

    m.build([])
    value = m.passthrough(m.lookup({}, "a"))
    m.explicit()
    m.optional("k")
    try:
        m.trace({})
    except AttributeError as exc:
        m.late(False)  # after the raise: not before it
        raise RuntimeError("wrapped") from exc
    ''')


def test_the_probe_records_the_nones_functions_made_before_the_exception(tmp_path: Path):
    site = tmp_path / "site"
    (site / "torch" / "_dynamo").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch" / "_dynamo" / "__init__.py").write_text("")
    (site / "torch" / "_dynamo" / "mod.py").write_text(FAKE_MODULE)
    script = tmp_path / "repro.py"
    script.write_text(FAKE_SCRIPT)
    out = tmp_path / "spectrum.json"
    proc = subprocess.run([sys.executable, str(PROBES / "spectrum.py"), "--out", str(out), "--none-returns", "--",
                           str(PROBES / "launcher.py"), "--", str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1 and "RuntimeError: wrapped" in proc.stderr, proc.stderr
    data = json.loads(out.read_text())
    assert data["lines"]["torch/_dynamo/mod.py"], data  # the spectrum is recorded as ever
    made = [r["function"] for r in data["none_returns"]]
    # most recent first; a procedure's bare return, a None passed through, and what ran after the raise are not
    # recorded; an explicit `return None` is, whatever its annotation (the server reads that)
    assert made == ["lookup", "optional", "explicit"], made
    lines = FAKE_MODULE.splitlines()
    at = {r["function"]: lines[r["line"] - 1].strip() for r in data["none_returns"]}
    assert at["optional"] == at["explicit"] == "return None", at
    assert data["none_returns"][0]["first_line"] == 1 and at["lookup"] in ("if key in table:", "return table[key]")
    # where each None was made, against the exception's traceback: lookup's last None was made beneath
    # `trace`, which the exception also left through; the others beneath the script's own module code only
    meets = {r["function"]: (r["meet"], r["shared"]) for r in data["none_returns"]}
    assert meets["lookup"][0] == "trace" and meets["optional"][0] == meets["explicit"][0] == "<module>", meets
    assert meets["lookup"][1] == meets["optional"][1] + 1 and meets["optional"][1] == meets["explicit"][1] > 0
    assert all(r["file"] == "torch/_dynamo/mod.py" and isinstance(r["first_line"], int) for r in data["none_returns"])
    # without the flag, nothing of it
    plain = subprocess.run([sys.executable, str(PROBES / "spectrum.py"), "--out", str(out), "--",
                            str(PROBES / "launcher.py"), "--", str(script)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert plain.returncode == 1 and "none_returns" not in json.loads(out.read_text())


SOURCES = textwrap.dedent('''\
    from typing import Any, Optional


    def falls_off(x) -> int:
        if x:
            return 1


    def optional(x) -> Optional[int]:
        if x:
            return 1


    def union(x) -> "int | None":
        return None


    def procedure(items):
        if not items:
            return
        items.append(1)


    def annotated_none(items) -> None:
        return None


    def only_none():
        return None


    def any_value(x) -> Any:
        if x:
            return x
        return


    def callable_of_any(x) -> "Callable[..., Any]":
        if x:
            return x


    def documented(source) -> "LeafSpec":
        """Look the spec up.
        Returns ``None`` if the source isn't covered."""
        if source:
            return source
        return None


    def documented_or(source) -> "Choice":
        """A new choice, or None if generation fails."""
        if source:
            return source
        return None


    def listed(tree) -> "Tree":
        """Map the tree.

        Returns:
            a tree of (int, float, str, bool, None, torch.Tensor) leaves
        """
        if tree:
            return tree
        return None
    ''')


def test_only_a_none_someone_may_have_wanted_is_a_suspect(tmp_path: Path):
    (tmp_path / "torch" / "_dynamo").mkdir(parents=True)
    (tmp_path / "torch" / "_dynamo" / "a.py").write_text(SOURCES)
    lines = SOURCES.splitlines()
    defs = {n.name: n for n in ast.walk(ast.parse(SOURCES)) if isinstance(n, ast.FunctionDef)}

    def entry(name: str, line_text: str | None = None) -> dict:
        fn = defs[name]
        line = (next(i for i in range(fn.lineno, fn.end_lineno + 1) if lines[i - 1].strip() == line_text)
                if line_text else fn.end_lineno)  # the end of its body
        return {"file": "torch/_dynamo/a.py", "function": name, "first_line": fn.lineno, "line": line}

    genexpr = {"file": "torch/_dynamo/a.py", "function": "f.<locals>.<genexpr>", "first_line": 1, "line": 1}
    returns = [entry("optional"), entry("union", "return None"), entry("procedure", "return"),
               entry("annotated_none", "return None"), genexpr, entry("documented", "return None"),
               entry("documented_or", "return None"),
               entry("falls_off", "if x:"), entry("only_none", "return None"), entry("any_value", "return"),
               entry("callable_of_any")]
    found = none_origin_suspects(returns, tmp_path, "TypeError: 'NoneType' object is not callable")
    assert [s.function for s in found] == ["falls_off", "only_none", "any_value"][:MAX_NONE_ORIGINS]
    assert all(s.evidence == ["none_origin"] and s.file == "torch/_dynamo/a.py" for s in found)
    why = {s.function: s.why for s in found}
    assert "the end of its body, though it is annotated to return int" in why["falls_off"]
    assert "through `return None` (line" in why["only_none"] and "annotated" not in why["only_none"]
    assert "a bare `return`" in why["any_value"] and "annotated" not in why["any_value"]
    assert "the 8th None counting back" in why["falls_off"]
    assert "before TypeError: 'NoneType' object is not callable used a None" in why["falls_off"]
    # a None made beneath a deeper frame of the exception's traceback goes first, whatever its recency
    deeper = [dict(r, shared=2, meet="outer") for r in returns[:-1]] + [dict(returns[-1], shared=9, meet="tracer")]
    first = none_origin_suspects(deeper, tmp_path, "TypeError")
    assert [s.function for s in first] == ["callable_of_any", "falls_off", "only_none"][:MAX_NONE_ORIGINS]
    assert "the 11th None counting back" in first[0].why and "called beneath `tracer`" in first[0].why
    # past the limit, the next one that qualifies
    rest = none_origin_suspects(returns[-1:] * 12, tmp_path, "TypeError")
    assert [s.function for s in rest] == ["callable_of_any"] * MAX_NONE_ORIGINS
    assert "annotated to return Callable[..., Any] (line" in rest[0].why and "the 2nd None" in rest[1].why


def test_a_broken_invariant_keeps_only_an_explicit_none_made_beneath_its_traceback(tmp_path: Path):
    (tmp_path / "torch" / "_dynamo").mkdir(parents=True)
    (tmp_path / "torch" / "_dynamo" / "a.py").write_text(SOURCES)
    first = {n.name: n.lineno for n in ast.walk(ast.parse(SOURCES)) if isinstance(n, ast.FunctionDef)}
    lines = SOURCES.splitlines()

    def entry(name: str, text: str, meet: str | None) -> dict:
        line = next(i for i in range(first[name], len(lines) + 1) if lines[i - 1].strip() == text)
        return {"file": "torch/_dynamo/a.py", "function": name, "first_line": first[name], "line": line,
                "meet": meet, "shared": 2 if meet else 0}

    returns = [entry("falls_off", "if x:", "outer"), entry("any_value", "return", "outer"),
               entry("only_none", "return None", None), entry("only_none", "return None", "outer"),
               entry("documented", "return None", "outer"), entry("listed", "return None", "outer")]
    found = none_origin_suspects(returns, tmp_path, "AssertionError: expected 2 shapes, got 0", used=False)
    # the end of a body and a bare return are too common to suspect for any assertion; an unrelated None too; a
    # docstring that says None may come back is believed, one that lists None among the leaf types says nothing
    assert [(s.function, "outer" in s.why) for s in found] == [("only_none", True), ("listed", True)], found
    assert "before AssertionError: expected 2 shapes, got 0 was raised (the None may be what broke it)" in found[0].why
    assert [s.function for s in none_origin_suspects(returns, tmp_path, "TypeError")] == [
        "falls_off", "any_value", "only_none"][:MAX_NONE_ORIGINS]


def test_an_assertion_raised_in_torch_is_a_broken_invariant():
    raised = ('Traceback (most recent call last):\n  File "/x/torch/export/_trace.py", line 3, in g\n'
              '    assert len(a) == 2, msg\nAssertionError: expected 2 shapes, got 0\n')
    assert broken_invariant(raised) == "AssertionError: expected 2 shapes, got 0" and none_used(raised) is None
    assert broken_invariant(raised.replace("/x/torch/export/_trace.py", "/home/me/repro.py")) is None
    assert broken_invariant(raised.replace("AssertionError", "ValueError")) is None


def test_an_exception_that_used_a_none_is_told_apart_by_the_first_torch_block():
    used = ('Traceback (most recent call last):\n  File "/x/torch/_dynamo/utils.py", line 3, in g\n'
            '    return f(*args)\nTypeError: \'NoneType\' object is not callable\n')
    assert none_used(used) == "TypeError: 'NoneType' object is not callable"
    other = used.replace("'NoneType' object is not callable", "unsupported operand type(s) for +: 'int' and 'str'")
    assert none_used(other) is None
    user = used.replace("/x/torch/_dynamo/utils.py", "/home/me/repro.py")
    assert none_used(user) is None  # raised in the user's code, not inside torch


# -- localize end to end on a planted missing return value in an AOTAutograd runtime wrapper --------------

EFFECT_TOKENS_FILE = "torch/_functorch/_aot_autograd/runtime_wrappers.py"
EFFECT_TOKENS_OLD = ("        num_tokens = len(runtime_metadata.tokens)\n        if num_tokens == 0:\n"
                     "            return compiled_fn\n")
EFFECT_TOKENS_NEW = ("        num_tokens = len(runtime_metadata.tokens)\n        if num_tokens == 0:\n"
                     "            return\n")
EFFECT_TOKENS_REPRO = textwrap.dedent('''\
    import torch


    def f(x, y):
        return torch.sin(x) * y + 1


    if __name__ == "__main__":
        x, y = torch.randn(8), torch.randn(8)
        out = torch.compile(f, backend="aot_eager")(x, y)
        torch.testing.assert_close(out, f(x, y))
    ''')


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_wrapper_that_returned_the_none_a_compiled_call_used_is_named(tmp_path: Path):
    """A bare `return` where `return compiled_fn` was meant: the compiled call fails much later, in a frame that
    only calls what it was given, and the commit is upstream (a remote branch holds it), so no own-change rule
    names it. The run that records the Nones names the wrapper's post_compile, and says how it returned."""
    from planted_bugs import PlantedBug, localize_upstream
    from torch_checkout import build_torch_checkout

    made = build_torch_checkout(tmp_path)
    bug = PlantedBug(name="effect_tokens", file=EFFECT_TOKENS_FILE, old=EFFECT_TOKENS_OLD, new=EFFECT_TOKENS_NEW,
                     repro=EFFECT_TOKENS_REPRO, layer="AOTAutograd", guilty="EffectTokensWrapper.post_compile",
                     what="returns None instead of the compiled function when there are no effect tokens",
                     commit_message="AOTAutograd: effect tokens wrapper tidy")
    data = await localize_upstream(made.root, made.checkout, made.python, bug, "repro_tokens.py")
    assert data["layer"] == "AOTAutograd", data["table"]
    top3 = [(s["file"], s["function"]) for s in data["suspects"][:3]]
    assert (EFFECT_TOKENS_FILE, "EffectTokensWrapper.post_compile") in top3, data["suspects"][:5]
    guilty = next(s for s in data["suspects"] if s["function"] == "EffectTokensWrapper.post_compile")
    assert "none_origin" in guilty["evidence"], guilty
    assert "a bare `return`, though it is annotated to return Callable[..., Any]" in guilty["why"], guilty
    source = (made.checkout / EFFECT_TOKENS_FILE).read_text().splitlines()
    assert source[guilty["line"] - 1].strip() == "return", guilty
    # the innermost frame, which only calls what it was given, is still there
    assert any(s["evidence"] == ["exception"] for s in data["suspects"][:4]), data["suspects"][:4]
