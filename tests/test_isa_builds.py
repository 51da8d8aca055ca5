"""Inductor's ISA probe builds are kept per machine and copied into each case's private cache: a second case
finds them built, picks the same ISAs, and never copies a kernel, a build in progress, or into a run whose
caches are disabled."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from pt2_bug_basher.case.store import Store
from pt2_bug_basher.execution import isa_builds
from pt2_bug_basher.execution.isa_builds import keep_isa_builds, probe_keys, seed_isa_builds
from pt2_bug_basher.execution.runs import CACHE_ENV, execute, private_cache_env

pytestmark = pytest.mark.anyio

VALID_ISAS = ("from torch._inductor.cpu_vec_isa import valid_vec_isa_list; "
              "print(sorted(str(isa) for isa in valid_vec_isa_list()))")


def builds(cache_dir: Path) -> dict[str, tuple[int, int]]:
    """Each probe library in an Inductor cache: (inode, mtime in ns), to tell a copy kept from one rebuilt."""
    return {so.stem: (so.stat().st_ino, so.stat().st_mtime_ns) for so in cache_dir.glob("??/*.so")
            if so.stem in probe_keys(cache_dir)}


async def test_a_second_case_finds_the_probes_built_and_picks_the_same_isas(tmp_path, monkeypatch):
    monkeypatch.setenv("PT2_BUG_BASHER_CACHE_DIR", str(tmp_path / "machine"))
    store = Store(tmp_path / "state")
    first, second = (store.create_case(str(tmp_path), sys.executable, {}) for _ in range(2))
    argv = [sys.executable, "-c", VALID_ISAS]

    run = await execute(store, first, argv, tool="run_with_logs", cwd=tmp_path)
    assert run.outcome.exit_code == 0, run.stderr_text()
    built = builds(Path(private_cache_env(store, first.case_id)[CACHE_ENV]))
    if not built:
        pytest.skip("this Inductor built no ISA probe (no x86 vector ISA on this CPU)")
    assert set(builds(isa_builds.shared_dir())) == set(built)  # kept once the run ended

    second_cache = Path(private_cache_env(store, second.case_id)[CACHE_ENV])
    seed_isa_builds(second_cache)
    seeded = builds(second_cache)
    assert set(seeded) == set(built)
    again = await execute(store, second, argv, tool="run_with_logs", cwd=tmp_path)
    assert again.stdout_text() == run.stdout_text()  # the same ISAs, from the copies
    assert builds(second_cache) == seeded  # none rebuilt: the same files, untouched


def _fake_build(cache_dir: Path, key: str, source: bytes) -> None:
    (cache_dir / key[1:3]).mkdir(parents=True, exist_ok=True)
    (cache_dir / key[1:3] / f"{key}.cpp").write_bytes(source)
    (cache_dir / key[1:3] / f"{key}.so").write_bytes(b"\x7fELF" + bytes(64))


def test_only_probes_are_kept_and_a_locked_build_or_a_cacheless_run_is_left_alone(tmp_path):
    case, shared = tmp_path / "case", tmp_path / "shared"
    probe = b'extern "C" void __avx_chk_kernel() {}\n'
    _fake_build(case, "cprobeaaaa", probe)
    _fake_build(case, "ckernelbbb", b"#include <cpp_prefix.h>\nextern \"C\" void kernel() {}\n")
    _fake_build(case, "cbigprobec", probe + b"//" + b"x" * isa_builds.MAX_PROBE_SOURCE)
    old = case / "ol" / "coldprobee.cpp"
    _fake_build(case, "coldprobee", probe)
    os.utime(old, (1e9, 1e9))  # written long before the run: not read again
    keep_isa_builds(case, since=time.time() - 60, shared=shared)
    assert sorted(p.name for p in shared.glob("??/*")) == ["cprobeaaaa.cpp", "cprobeaaaa.so"]
    keep_isa_builds(case, shared=shared)  # no run's start: every source is read
    assert sorted(p.stem for p in shared.glob("??/*.so")) == ["coldprobee", "cprobeaaaa"]

    _fake_build(shared, "cprobedddd", probe)
    other = tmp_path / "other"
    seed_isa_builds(other, {"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}, shared=shared)
    assert not other.exists()
    (other / "locks").mkdir(parents=True)
    with FileLock(str(other / "locks" / "cprobedddd.lock")):  # an Inductor of the case is building it
        seed_isa_builds(other, shared=shared)
    assert sorted(p.stem for p in other.glob("??/*.so")) == ["coldprobee", "cprobeaaaa"]
    assert not list(other.glob("??/*.tmp"))
    seed_isa_builds(other, shared=shared)
    assert (other / "pr" / "cprobedddd.so").read_bytes() == (shared / "pr" / "cprobedddd.so").read_bytes()
