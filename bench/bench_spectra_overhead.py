"""What recording a spectrum costs a run: the same repro run with and without the coverage probe.

Runs go through the server's own `execute`, as localize's do: children forked from the case's warm
interpreter (torch imported once) and, with --fresh, new processes too. The two kinds of run alternate,
so load on the machine falls on both alike. Prints each repro's median seconds without and with the
probe and their ratio (goal: <= 1.3x).

    python bench/bench_spectra_overhead.py [--repeat N] [--fresh] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "server")]

from pt2_bug_basher.case.store import Store  # noqa: E402
from pt2_bug_basher.execution.runs import (  # noqa: E402
    LAUNCHER,  # noqa: E402
    execute,
    with_spectrum,
)
from pt2_bug_basher.execution.warm import WarmRequest, stop_all  # noqa: E402

REPROS = {
    "aot_eager_mutation": ("aot_eager", '''\
import torch


def f(x, h):
    h.add_(x)
    return (h * 2).sin()


x = torch.randn(8)
h = torch.randn(8, requires_grad=True).clone()
torch.compile(f)(x, h)
'''),
    "inductor_pow": ("inductor", '''\
import torch


def f(x):
    return torch.pow(x, 3) + 1


x = torch.randn(16)
torch.testing.assert_close(torch.compile(f)(x), f(x))
'''),
    "dynamo_eager_loop": ("eager", '''\
import torch


def total(xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out * 2


torch.compile(total)([torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 3.0)])
'''),
}


async def measure(root: Path, repeat: int, fresh: bool) -> list[dict]:
    store = Store(root / "state")
    case = store.create_case(str(root), sys.executable, {"torch": {"cuda_available": False, "gpus": []}})
    rows = []
    for name, (backend, source) in REPROS.items():
        script = root / f"{name}.py"
        script.write_text(source)
        argv = [sys.executable, str(LAUNCHER), "--backend", backend, "--", str(script)]
        modes = [("forked", WarmRequest())] + ([("fresh", None)] if fresh else [])
        for mode, warm in modes:
            seconds: dict[str, list[float]] = {"plain": [], "spectrum": []}
            await execute(store, case, argv, tool="bench", cwd=root, warm=warm)  # starts the warm interpreter
            for i in range(repeat):
                for kind in ("plain", "spectrum") if i % 2 == 0 else ("spectrum", "plain"):
                    out = root / f"{name}-{mode}-{i}.json"
                    run = with_spectrum(store, argv, out) if kind == "spectrum" else argv
                    started = time.monotonic()
                    result = await execute(store, case, run, tool="bench", cwd=root, warm=warm)
                    took = time.monotonic() - started
                    if result.outcome.exit_code != 0:
                        raise SystemExit(f"{name} failed: {result.stderr_text()[-2000:]}")
                    if kind == "spectrum" and not out.is_file():
                        raise SystemExit(f"{name}: no spectrum written: {result.stderr_text()[-2000:]}")
                    seconds[kind].append(took)
            plain, spectrum = statistics.median(seconds["plain"]), statistics.median(seconds["spectrum"])
            rows.append({"repro": name, "mode": mode, "plain_s": round(plain, 2), "spectrum_s": round(spectrum, 2),
                         "ratio": round(spectrum / plain, 2), "runs": repeat})
            print(f"{name:20s} {mode:6s} plain {plain:6.2f} s  with spectrum {spectrum:6.2f} s  "
                  f"ratio {spectrum / plain:.2f}", flush=True)
    stop_all()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--fresh", action="store_true", help="also time new processes (torch imported each time)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = anyio.run(measure, Path(tempfile.mkdtemp(prefix="bench-spectra-")), args.repeat, args.fresh)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
