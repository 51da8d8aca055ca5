"""Set up a case as a user would meet it: a develop-style torch checkout with one planted bug on main.

    python bench/plant_case.py RECIPE DIR

Builds DIR/checkout (the installed torch's Python sources as a git repository, with a virtualenv whose
interpreter imports torch from it, DIR/pyenv/bin/python), resets main to the clean sources, commits
the recipe's bug on main (tests/planted_bugs.py), checks out a new branch `fix` and writes the
user's repro to DIR/repro.py. Prints the paths as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from planted_bugs import PLANTED, plant  # noqa: E402
from torch_checkout import build_torch_checkout, git  # noqa: E402


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in PLANTED:
        sys.exit(f"usage: plant_case.py {{{','.join(PLANTED)}}} DIR")
    bug = PLANTED[sys.argv[1]]
    root = Path(sys.argv[2]).resolve()
    root.mkdir(parents=True, exist_ok=True)
    made = build_torch_checkout(root)
    checkout = made.checkout
    git(checkout, "checkout", "-q", "-f", "main")
    git(checkout, "reset", "-q", "--hard", "clean")
    plant(checkout, bug)
    git(checkout, "branch", "-q", "-D", "fix")
    git(checkout, "checkout", "-q", "-b", "fix")
    (root / "repro.py").write_text(bug.repro)
    print(json.dumps({"checkout": str(checkout), "python": str(made.python), "repro": str(root / "repro.py"),
                      "bug": bug.name, "planted_in": bug.file}, indent=1))


if __name__ == "__main__":
    main()
