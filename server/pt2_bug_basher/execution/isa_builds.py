"""Inductor's CPU ISA probes, built once per machine and copied into every case-private cache.

Before its first CPU kernel in a new TORCHINDUCTOR_CACHE_DIR, Inductor compiles a small C++ probe per vector
ISA the CPU reports (about 2 s each here) to learn which ones the compiler can build and the loader can load.
Each case, and each of its bisections, has a cache of its own, so every case paid for them again.

The builds are named by Inductor's own key, a hash of the probe's source, the compiler's version, the ISA's
flags and torch's version (`cpu_vec_isa._get_isa_dry_compile_fingerprint`): a copied build is found only where
Inductor would have built the very same file, and Inductor still loads it in a child before trusting it. A
build is read or written under Inductor's own lock for its key, so a half-written library is never copied.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock, Timeout

from pt2_bug_basher.case.config import machine_cache_dir

PROBE_MARKER = b"_chk_kernel"  # every probe's entry point in cpu_vec_isa.py: __avx_chk_kernel, __amx_chk_kernel, ...
MAX_PROBE_SOURCE = 8192  # bytes: the probe is a few hundred; a kernel's source is not read past this
BUILD_SUFFIXES = (".cpp", ".so")
DISABLED_ENV = "TORCHINDUCTOR_FORCE_DISABLE_CACHES"  # Inductor then builds in a new temporary directory
MTIME_SLACK_S = 2.0  # file systems whose times are coarser than the clock's


def shared_dir() -> Path:
    return machine_cache_dir() / "inductor-isa"


def probe_keys(cache_dir: Path, since: float | None = None) -> set[str]:
    """Keys of the ISA probes built in an Inductor cache directory (`<2 chars>/<key>.cpp` beside `<key>.so`),
    those written at or after `since` (a run's start) only where it is given: a run reads no older source."""
    keys = set()
    for source in cache_dir.glob("??/*.cpp"):
        try:
            stat = source.stat()
            if stat.st_size > MAX_PROBE_SOURCE or (since is not None and stat.st_mtime < since - MTIME_SLACK_S):
                continue
            if source.with_suffix(".so").is_file() and PROBE_MARKER in source.read_bytes():
                keys.add(source.stem)
        except OSError:
            continue
    return keys


def _kept(shared: Path) -> set[str]:
    """The store holds nothing but probes: its keys are its libraries' names."""
    return {so.stem for so in shared.glob("??/*.so")}


def _copy_build(key: str, source_dir: Path, target_dir: Path, lock_dir: Path) -> None:
    """Copy one probe's files into target_dir (each written whole, then renamed), holding Inductor's lock for
    the key in the case's cache (`lock_dir`): no Inductor of the case builds it meanwhile."""
    sub = key[1:3]
    try:
        lock_dir.mkdir(parents=True, exist_ok=True)
        with FileLock(str(lock_dir / f"{key}.lock"), timeout=0):
            (target_dir / sub).mkdir(parents=True, exist_ok=True)
            for suffix in BUILD_SUFFIXES:
                src, dst = source_dir / sub / f"{key}{suffix}", target_dir / sub / f"{key}{suffix}"
                if dst.exists():
                    continue
                with (src.open("rb") as read,
                      tempfile.NamedTemporaryFile(dir=dst.parent, prefix=dst.name, suffix=".tmp", delete=False) as tmp):
                    try:
                        shutil.copyfileobj(read, tmp)
                    except OSError:
                        Path(tmp.name).unlink(missing_ok=True)
                        raise
                os.replace(tmp.name, dst)
    except (Timeout, OSError):
        pass  # being built or unreadable: this run builds it, as Inductor would have


def seed_isa_builds(cache_dir: Path, env: dict[str, str] | None = None, shared: Path | None = None) -> None:
    """Before a run: give `cache_dir` the store's probes it lacks (a stat per probe; no source is read). A run
    whose caches are disabled builds in a temporary directory of its own: it is left alone."""
    if (env or {}).get(DISABLED_ENV) == "1":
        return
    shared = shared or shared_dir()
    for key in sorted(_kept(shared)):
        if not (cache_dir / key[1:3] / f"{key}.so").exists():
            _copy_build(key, shared, cache_dir, cache_dir / "locks")


def keep_isa_builds(cache_dir: Path, since: float | None = None, shared: Path | None = None) -> None:
    """After a run: keep in the machine's store the probes `cache_dir` holds and it lacks (of those written
    since `since`, the run's start, where it is given)."""
    shared = shared or shared_dir()
    for key in sorted(probe_keys(cache_dir, since) - _kept(shared)):
        _copy_build(key, cache_dir, shared, cache_dir / "locks")
