"""Near-miss variants of a repro: each changes one thing, on the syntax tree, and still runs."""

from __future__ import annotations

import ast

from pt2_bug_basher.reduce.variants import MAX_VARIANTS, VariantOutcome, circumstances, generate

REPRO = '''\
import torch


def f(x, h):
    y = x * 2
    h.add_(y)
    h.zero_()
    return h.sin()


if __name__ == "__main__":
    x = torch.randn(4)
    h = torch.randn(4, requires_grad=True)
    w = torch.arange(3)
    out = f(x, h.clone())
'''


def by_change(source: str) -> dict[str, str]:
    return {v.change: v.source for v in generate(source, limit=50)}


def test_each_kind_of_edit_changes_one_thing():
    variants = generate(REPRO, limit=50)
    changes = [v.change for v in variants]
    assert "`add` instead of `add_` (line 6)" in changes
    assert "`h` does not require grad (line 13)" in changes
    assert "`x` is float64 (line 12)" in changes and "`h` is float64 (line 13)" in changes
    # zero_ has no out-of-place twin named zero; arange's dtype follows its arguments
    assert not any("`zero`" in c for c in changes) and not any("`w` is float64" in c for c in changes), changes
    assert "without line 5: `y = x * 2`" in changes
    for v in variants:
        ast.parse(v.source)  # every variant is a program
        assert v.source != REPRO
    ids = [v.id for v in variants]
    assert len(ids) == len(set(ids))


def test_an_in_place_statement_becomes_an_assignment_of_the_out_of_place_op():
    source = by_change(REPRO)["`add` instead of `add_` (line 6)"]
    assert "h = h.add(y)" in source and "add_" not in source and "h.zero_()" in source


def test_a_removed_statement_leaves_the_rest_of_its_body():
    source = by_change(REPRO)["without line 5: `y = x * 2`"]
    tree = ast.parse(source)
    f = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    assert [ast.unparse(s) for s in f.body] == ["pass", "h.add_(y)", "h.zero_()", "return h.sin()"]


def test_a_docstring_is_not_a_statement_to_remove():
    """Seen by an agent: a variant "without line 5" removed a forward's docstring, a run that could show nothing."""
    source = 'class M:\n    def forward(self, x):\n        """Scale it."""\n        y = x * 2\n        return y\n'
    changes = [v.change for v in generate(source, limit=50) if v.kind == "statement_removed"]
    assert changes == ["without line 4: `y = x * 2`"], changes


def test_variants_run_and_change_what_they_say():
    """Executed for real: the requires_grad and dtype variants give the tensors they describe."""
    import torch

    script = "import torch\nh = torch.ones(3, requires_grad=True)\ng = torch.zeros(2)\ng.requires_grad_()\n"
    made = by_change(script)
    original: dict = {}
    exec(compile(script, "<repro>", "exec"), original)
    assert original["h"].requires_grad and original["g"].requires_grad
    no_grad: dict = {}
    exec(compile(made["`h` does not require grad (line 2)"], "<variant>", "exec"), no_grad)
    assert not no_grad["h"].requires_grad and no_grad["g"].requires_grad
    g_off = next(src for change, src in made.items() if change.startswith("`g.requires_grad_()` does not"))
    ns: dict = {}
    exec(compile(g_off, "<variant>", "exec"), ns)
    assert not ns["g"].requires_grad and ns["h"].requires_grad
    wide: dict = {}
    exec(compile(made["`h` is float64 (line 2)"], "<variant>", "exec"), wide)
    assert wide["h"].dtype == torch.float64 and wide["g"].dtype == torch.float32


def test_the_budget_takes_each_kind_in_turn():
    limited = generate(REPRO, limit=4)
    assert [v.kind for v in limited] == ["no_requires_grad", "out_of_place", "float64", "statement_removed"]
    assert len(generate(REPRO)) == MAX_VARIANTS


def test_a_script_that_does_not_parse_has_no_variants():
    assert generate("def f(:\n") == []
    assert generate("print('no tensors here')\n") == []


def test_circumstances_say_what_each_passing_variant_changed():
    outcomes = [
        VariantOutcome(id="a", kind="no_requires_grad", change="`h` does not require grad (line 13)", line=13,
                       outcome="passes", run_id="run-1"),
        VariantOutcome(id="b", kind="out_of_place", change="`add` instead of `add_` (line 6)", line=6,
                       outcome="passes", run_id="run-2"),
        VariantOutcome(id="c", kind="float64", change="`x` is float64 (line 12)", line=12,
                       outcome="same failure", run_id="run-3"),
    ]
    assert circumstances(outcomes) == ["passes when `h` does not require grad (line 13)",
                                       "passes with `add` instead of `add_` (line 6)"]
