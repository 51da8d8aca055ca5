"""The bench scripts still import against the package (they are not run by the suite, so they rot silently)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_bench_script_imports(script: Path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # the scripts prepend their own folders
    spec = importlib.util.spec_from_file_location(f"bench_import_check_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # module level only: main() is behind `if __name__ == "__main__"`
    assert callable(getattr(module, "main", None)), f"{script.name} has no main()"
