"""The text model of classify's last guess and similar_reports: fitted in a fresh process against loaded
from the model cache in a fresh process, alternately, N times each; prints medians and the ratio.

Every command-line call (`pt2-bug-basher call ...`) is a new process, so without the cache each
classify_error that needs the model would fit it again.
    python bench/bench_model_cache.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOAD = "from pt2_bug_basher.analysis import learned; learned.default_model()"


def one_process(cache_dir: Path) -> float:
    env = {**os.environ, "PT2_BUG_BASHER_CACHE_DIR": str(cache_dir),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "server"), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", LOAD], env=env, check=True, timeout=300)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    fitted, loaded = [], []
    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm"
        one_process(warm)  # fills the warm cache
        for i in range(runs):
            fitted.append(one_process(Path(tmp) / f"cold-{i}"))  # an empty cache: fits and saves
            loaded.append(one_process(warm))
    fit, load = statistics.median(fitted), statistics.median(loaded)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, {runs} runs each (process start included)")
    print(f"  fit in a fresh process:       median {fit:.2f} s  ({', '.join(f'{t:.2f}' for t in fitted)})")
    print(f"  load from the model cache:    median {load:.2f} s  ({', '.join(f'{t:.2f}' for t in loaded)})")
    print(f"  ratio load / fit: {load / fit:.3f}")


if __name__ == "__main__":
    main()
