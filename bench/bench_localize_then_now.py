"""localize on the planted recipes: the server before the spectra (issue 30's start) beside the working tree's.

For each recipe of tests/planted_bugs.py, `bench_bisect.py --only NAME --skip-baseline` runs twice, one after
the other, alternating which goes first: once with the package of --old-commit (checked out in a git worktree)
and once with the working tree's. Each run builds its own checkout, plants the bug and times localize alone.
Prints both wall times, the guilty function's rank in each, and new/old per recipe and as a median (issue 30's
goal: at most 1.5).

    python bench/bench_localize_then_now.py [--old-commit 41e0fc3] [--only NAME ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import git

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from planted_bugs import PLANTED  # noqa: E402

RUN_TIMEOUT_S = 3600


def localize_once(name: str, server_src: Path | None, out: Path) -> dict:
    argv = [sys.executable, str(ROOT / "bench" / "bench_bisect.py"), "--only", name, "--skip-baseline",
            "--json", str(out)]
    if server_src is not None:
        argv += ["--server-src", str(server_src)]
    subprocess.run(argv, check=True, timeout=RUN_TIMEOUT_S, stdout=subprocess.DEVNULL)
    [row] = json.loads(out.read_text())
    return {"seconds": row["ours"].get("seconds"), "rank": row["ours"].get("rank"),
            "layer": row["ours"].get("layer"), "error": row["ours"].get("error")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-commit", default="41e0fc3", help="the tree before the spectra (issue 30)")
    parser.add_argument("--only", nargs="*", choices=sorted(PLANTED))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    repo = git.Repo(ROOT)
    with tempfile.TemporaryDirectory(prefix="bench-then-now-") as tmp:
        old_tree = Path(tmp) / "old"
        repo.git.worktree("add", "--detach", str(old_tree), args.old_commit)
        try:
            rows = []
            for i, name in enumerate(args.only or list(PLANTED)):
                sides = [("old", old_tree / "server"), ("new", None)]
                row: dict = {"bug": name}
                for side, src in (sides if i % 2 == 0 else sides[::-1]):
                    row[side] = localize_once(name, src, Path(tmp) / f"{name}-{side}.json")
                old_s, new_s = row["old"]["seconds"], row["new"]["seconds"]
                row["ratio"] = round(new_s / old_s, 2) if old_s and new_s else None
                rows.append(row)
                print(f"{name}: old {old_s} s (rank {row['old']['rank']}), new {new_s} s (rank {row['new']['rank']}), "
                      f"new/old {row['ratio']}", flush=True)
        finally:
            repo.git.worktree("remove", "--force", str(old_tree))
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    if ratios:
        print(f"median new/old: {statistics.median(ratios):.2f} over {len(ratios)} recipes")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
