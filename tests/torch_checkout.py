"""Fixture helpers: real git repositories for the test, worktree and verification tools.

`build_torch_checkout` turns the installed torch into a git checkout of its own Python sources,
the way a develop build looks: `torch/**.py` tracked on `main`, the compiled parts (torch/lib,
extension modules, headers, every other non-.py file) present as symlinks but untracked and
excluded, the generated torch/version.py untracked too, and a virtualenv whose interpreter
imports torch from the checkout. A real bug is planted in Dynamo on `main`.

`make_mini_repo` is a small package with a PyTorch-style test file, for the focused tests.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from dataclasses import dataclass
from pathlib import Path

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e",
           "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def git_init(path: Path, branch: str = "main") -> None:
    git(path, "init", "-q", "-b", branch)
    git(path, "config", "user.name", "t")
    git(path, "config", "user.email", "t@e")
    git(path, "config", "commit.gpgsign", "false")


# -- the torch checkout -------------------------------------------------------------------------

BUILTIN = "torch/_dynamo/variables/builtin.py"
SORT_CALL = '            list_var.call_method(tx, "sort", [], kwargs)\n'
PLANTED = '            reverse = kwargs["reverse"]  # noqa: F841\n'

EXCLUDE = """\
# build outputs of a develop build: present in the tree, never tracked
/torch/**
!/torch/**/
!/torch/**/*.py
/torch/version.py
__pycache__/
*.pyc
"""

TEST_REPROS = '''\
# Owner(s): ["module: dynamo"]
"""Repros of Dynamo issues (the topical home for small Dynamo bug tests)."""

import torch
import torch._dynamo.test_case
import torch._dynamo.testing


class ReproTests(torch._dynamo.test_case.TestCase):
    def test_sorted_reverse(self):
        def fn(x):
            order = sorted([3, 1, 2], reverse=True)
            return x * order[0]

        x = torch.ones(3)
        self.assertEqual(torch.compile(fn, backend="eager")(x), fn(x))

    def test_sorted_key(self):
        def fn(x):
            order = sorted([3, -1, 2], key=abs, reverse=False)
            return x + order[-1]

        x = torch.ones(3)
        self.assertEqual(torch.compile(fn, backend="eager")(x), fn(x))

    def test_add_constant(self):
        def fn(x):
            return x + 1

        x = torch.ones(2)
        self.assertEqual(torch.compile(fn, backend="eager")(x), fn(x))


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
'''

REGISTERED_TEST = '''
    def test_sorted_without_kwargs(self):
        def fn(x):
            order = sorted([3, 1, 2])
            return x * order[0]

        x = torch.ones(3)
        self.assertEqual(torch.compile(fn, backend="eager")(x), fn(x))
'''

REPRO = '''\
import torch


def fn(x):
    order = sorted([3, 1, 2])
    return x * order[0]


print(torch.compile(fn, backend="eager")(torch.ones(3)))
'''


@dataclass
class TorchCheckout:
    root: Path
    checkout: Path
    python: Path
    planted_commit: str
    clean_commit: str


def installed_torch() -> Path:
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin, "torch is not installed"
    return Path(spec.origin).parent


def _has_python(path: Path) -> bool:
    return any(any(f.endswith(".py") for f in files) for _dirpath, _dirs, files in os.walk(path))


def _mirror(source: Path, target: Path) -> None:
    """Copy .py files, symlink everything else (whole directories when they hold no Python)."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(source):
        if entry.name == "__pycache__":
            continue
        src, dst = Path(entry.path), target / entry.name
        if entry.is_dir(follow_symlinks=False):
            if _has_python(src):
                _mirror(src, dst)
            else:
                dst.symlink_to(src, target_is_directory=True)
        elif entry.name.endswith(".py"):
            shutil.copy2(src, dst)
        else:
            dst.symlink_to(src)


def make_checkout_python(root: Path, checkout: Path) -> Path:
    """A virtualenv whose interpreter imports torch from the checkout, and everything else torch
    needs from the test run's own site-packages."""
    env_dir = root / "pyenv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "torch_checkout.pth").write_text(f"{checkout}\n{ours}\n")
    return python


def build_clean_checkout(root: Path) -> tuple[Path, str]:
    """The installed torch's sources committed and tagged `clean` in root/checkout; returns it and the commit."""
    checkout = root / "checkout"
    _mirror(installed_torch(), checkout / "torch")
    (checkout / "test" / "dynamo").mkdir(parents=True)
    (checkout / "test" / "dynamo" / "test_repros.py").write_text(TEST_REPROS)
    (checkout / "README.md").write_text("torch sources, as a develop checkout\n")
    git_init(checkout)
    (checkout / ".git" / "info" / "exclude").write_text(EXCLUDE)
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "torch sources")
    git(checkout, "tag", "clean")
    return checkout, git(checkout, "rev-parse", "HEAD").strip()


def build_torch_checkout(root: Path) -> TorchCheckout:
    checkout, clean = build_clean_checkout(root)
    builtin = checkout / BUILTIN
    text = builtin.read_text()
    assert text.count(SORT_CALL) == 1, "call_sorted changed in this torch: update the planted bug"
    builtin.write_text(text.replace(SORT_CALL, PLANTED + SORT_CALL))
    git(checkout, "commit", "-q", "-am", "Dynamo: read sorted()'s reverse flag")
    planted = git(checkout, "rev-parse", "HEAD").strip()
    git(checkout, "checkout", "-q", "-b", "fix")
    python = make_checkout_python(root, checkout)
    where = subprocess.run([str(python), "-c", "import torch; print(torch.__file__)"], check=True,
                           capture_output=True, text=True, cwd=root).stdout.strip()
    assert Path(where).is_relative_to(checkout), where
    return TorchCheckout(root, checkout, python, planted, clean)


def add_registered_test(checkout: Path) -> None:
    path = checkout / "test" / "dynamo" / "test_repros.py"
    text = path.read_text()
    anchor = "\n\nif __name__"
    path.write_text(text.replace(anchor, REGISTERED_TEST.rstrip("\n") + "\n" + anchor, 1))


def fix_planted_bug(checkout: Path) -> None:
    path = checkout / BUILTIN
    path.write_text(path.read_text().replace(PLANTED, ""))


# -- a small repository ------------------------------------------------------------------------

MINI_OPS = '''\
def double(x):
    return x * 2


def halve(x):
    return x / 2
'''

MINI_TEST = '''\
from torch.testing._internal.common_utils import TestCase, run_tests

from pkg.ops import double, halve


class TestOps(TestCase):
    def test_halve(self):
        self.assertEqual(halve(4), 2)

    def test_double_small(self):
        self.assertEqual(double(1), 2)


if __name__ == "__main__":
    run_tests()
'''

MINI_REPRO = '''\
from pkg.ops import double

print(double(21))
'''


def make_mini_repo(path: Path, bug_on: str = "main") -> Path:
    """pkg/ops.py and test/test_ops.py, with a bug in double() for large inputs committed on
    `main` (bug_on="main") or only on the `work` branch (bug_on="branch"); HEAD is `work`."""
    (path / "pkg").mkdir(parents=True)
    (path / "pkg" / "__init__.py").write_text("")
    (path / "pkg" / "ops.py").write_text(MINI_OPS)
    (path / "test").mkdir()
    (path / "test" / "test_ops.py").write_text(MINI_TEST)
    (path / "repro.py").write_text(MINI_REPRO)
    git_init(path)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "ops")
    if bug_on == "branch":
        git(path, "checkout", "-q", "-b", "work")
    ops = path / "pkg" / "ops.py"
    ops.write_text(ops.read_text().replace("    return x * 2\n", MINI_BUG))
    git(path, "commit", "-q", "-am", "double: validate input")
    if bug_on == "main":
        git(path, "checkout", "-q", "-b", "work")
    return path


MINI_BUG = "    if x > 10:\n        raise ValueError(f\"double() cannot take {x}\")\n    return x * 2\n"
MINI_FIX = "    return x * 2\n"


def fix_mini_bug(path: Path) -> None:
    ops = path / "pkg" / "ops.py"
    ops.write_text(ops.read_text().replace(MINI_BUG, MINI_FIX))


def add_test(repo: Path, rel: str, method_source: str, cls: str = "TestOps") -> None:
    """Insert a test method at the end of class `cls` of a test file (before the main guard)."""
    path = repo / rel
    text = path.read_text()
    anchor = "\n\nif __name__"
    assert anchor in text
    body = "\n".join(("    " + ln if ln.strip() else "") for ln in method_source.strip("\n").splitlines())
    path.write_text(text.replace(anchor, "\n" + body + "\n" + anchor, 1))


def python_of_tests() -> str:
    return sys.executable
