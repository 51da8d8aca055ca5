"""Fixtures for the test, worktree, verification and review tools on a small real repository.

Loaded as a plugin by conftest.py, so its fixtures (`mini`, `mini_branch_bug`) reach every test. Cases are
opened directly in the store (the environment step is covered by check_env's own tests); the
reproduction evidence is what run_with_logs records, built from real runs of the repro script
parsed with the real failure parser and classifier.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from torch_checkout import make_mini_repo

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.domain.evidence import EnvironmentEvidence, ReproduceEvidence, TestEvidence
from pt2_bug_basher.mcp_server.server import create_server


@dataclass
class Mini:
    root: Path
    repo: Path
    config: ServerConfig
    server: object

    @property
    def store(self):
        return self.server.state.store  # type: ignore[attr-defined]

    def new_case(self, torch_from_repo: bool = False, python: str = sys.executable,
                 torch_env: dict | None = None) -> str:
        """A case as check_env opens it on a machine without CUDA (its runs may be forked from a warm
        interpreter); torch_env adds to or overrides the seeded torch report (cuda_available, gpus, ...)."""
        torch = {"imported_from_repo": torch_from_repo, "version": "seeded", "cuda_available": False, "gpus": [],
                 **(torch_env or {})}
        case = self.store.create_case(str(self.repo), python, {"torch": torch})
        self.store.add_evidence(case.case_id, "environment", True, f"seeded: {python}",
                                data=EnvironmentEvidence(python=python))
        return case.case_id

    def reproduce(self, case_id: str, script: str = "repro.py", waive_reduce: bool = True) -> dict:
        data = seed_reproduction(self.store, case_id, self.repo, script)
        if waive_reduce:
            self.store.add_waiver(case_id, "reduce", "the repro is already two lines long")
        return data


def seed_reproduction(store, case_id: str, repo: Path, script: str, python: str = sys.executable) -> dict:
    """Run the repro twice and record the reproduction evidence the way run_with_logs does."""
    from pt2_bug_basher.analysis.classify import classify

    signatures, last = set(), None
    for _ in range(2):
        proc = subprocess.run([python, script], cwd=repo, capture_output=True, text=True, timeout=300)
        assert proc.returncode != 0, f"the repro did not fail: {proc.stdout}{proc.stderr}"
        last = classify(proc.stderr, exit_code=proc.returncode)
        assert last.failure is not None, proc.stderr
        signatures.add(last.failure.signature)
    assert len(signatures) == 1, signatures
    failure = last.failure
    data = {"script": str(repo / script), "args": [], "signature": failure.signature, "category": last.category,
            "exception_type": failure.exception_type, "message": failure.message, "run_ids": [], "repeat": 2}
    store.add_evidence(case_id, "reproduce", True, f"{script} failed 2/2 times: {failure.signature}",
                       data=ReproduceEvidence(**data))
    return data


def mini_setup(root: Path, bug_on: str = "main") -> Mini:
    repo = make_mini_repo(root / "repo", bug_on=bug_on)
    config = ServerConfig(state_dir=root / "state", default_repo=repo, allowed_roots=(root,))
    return Mini(root, repo, config, create_server(config))


@pytest.fixture
def mini(tmp_path: Path) -> Mini:
    """The bug is on main and on the work branch (HEAD)."""
    return mini_setup(tmp_path, "main")


@pytest.fixture
def mini_branch_bug(tmp_path: Path) -> Mini:
    """The bug is only on the work branch (HEAD); main is fine."""
    return mini_setup(tmp_path, "branch")


LARGE_TEST = """
def test_double_large(self):
    self.assertEqual(double(21), 42)
"""


def seed_test(store, case_id: str, test_file: str = "test/test_ops.py", class_name: str = "TestOps",
              method: str = "test_double_large", exception_type: str = "ValueError") -> None:
    """Registered-test evidence as register_test records it, for tests of later steps' refusals."""
    store.add_evidence(case_id, "test", True, f"{class_name}.{method} fails (seeded)", tree_hash="seeded",
                       data=TestEvidence(
        test_file=test_file, test_name=f"{class_name}.{method}", class_name=class_name, method=method,
        node_id=f"{test_file}::{class_name}::{method}", keyword=None, message="seeded",
        category="unknown", signature=None, exception_type=exception_type, frame=None,
    ))


# A minimal PyTorch-style test file: a TestCase and the run_tests() guard.
VALID_TEST_FILE = """\
from torch.testing._internal.common_utils import TestCase, run_tests


class TestSomething(TestCase):
    def test_it(self):
        pass


if __name__ == "__main__":
    run_tests()
"""


async def call(mini: Mini, tool: str, **arguments):
    """One tool call through a real in-process client of the mini case's server."""
    from mcp import Client

    async with Client(mini.server) as client:
        return await client.call_tool(tool, arguments)
