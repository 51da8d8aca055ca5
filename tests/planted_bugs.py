"""Bugs to plant in a torch checkout (tests/torch_checkout.py), as data a bench or a test can reuse.

Each recipe replaces one exact piece of text in one torch source file and comes with a user repro
that shows the bug. `plant(checkout, name)` applies a recipe to a checkout built by
`build_torch_checkout` and commits it on the current branch.

    dynamo_guard   Dynamo no longer guards the length of a list (or tuple) input: a function compiled
                   for a 2-item list is reused for a 3-item one and silently returns the 2-item result.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch_checkout import git


@dataclass(frozen=True)
class PlantedBug:
    file: str
    """path of the torch source file, relative to the checkout root"""
    old: str
    """text that occurs exactly once in that file"""
    new: str
    """what replaces it"""
    repro: str
    """a user script that fails because of the bug (and passes without it)"""
    breaks: str
    """what goes wrong, in words"""
    layer: str
    """where localize should put it"""
    commit_message: str


DYNAMO_GUARD_REPRO = '''\
import torch


def total(xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out * 2


compiled = torch.compile(total, backend="eager")
two = [torch.ones(3), torch.full((3,), 2.0)]
three = [torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 3.0)]
torch.testing.assert_close(compiled(two), total(two))
torch.testing.assert_close(compiled(three), total(three))
print("ok")
'''

PLANTED_BUGS: dict[str, PlantedBug] = {
    "dynamo_guard": PlantedBug(
        file="torch/_dynamo/variables/builder.py",
        old=("        # have a stricter match.\n"
             "        self.install_guards(GuardBuilder.SEQUENCE_LENGTH)\n"),
        new="        # have a stricter match.\n",
        repro=DYNAMO_GUARD_REPRO,
        breaks=("VariableBuilder.wrap_listlike no longer installs the SEQUENCE_LENGTH guard (nor the TYPE_MATCH "
                "it brings), so a list input's items are guarded but its length is not: the entry compiled for "
                "a 2-item list is reused for a 3-item list and returns the 2-item sum, with backend='eager' and "
                "no error from the compiler."),
        layer="Dynamo",
        commit_message="Dynamo: guard list inputs through their items only",
    ),
}


def plant(checkout: Path, name: str, commit: bool = True) -> str | None:
    """Apply recipe `name` to a torch checkout; with `commit`, commit it and return the commit hash."""
    recipe = PLANTED_BUGS[name]
    path = checkout / recipe.file
    text = path.read_text()
    assert text.count(recipe.old) == 1, f"{recipe.file} changed in this torch: update the {name} recipe"
    path.write_text(text.replace(recipe.old, recipe.new))
    if not commit:
        return None
    git(checkout, "commit", "-q", "-am", recipe.commit_message)
    return git(checkout, "rev-parse", "HEAD").strip()


def unplant(checkout: Path, name: str) -> None:
    """Undo recipe `name` in the working tree (the fix)."""
    recipe = PLANTED_BUGS[name]
    path = checkout / recipe.file
    text = path.read_text()
    assert recipe.old not in text, f"{name} is not planted in {recipe.file}"
    path.write_text(text.replace(recipe.new, recipe.old, 1))
