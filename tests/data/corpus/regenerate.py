"""Rerun the failure-producing scripts and rewrite local.jsonl (or local_gpu.jsonl).

Usage (from the repository root, with the project's virtual environment):

    python tests/data/corpus/regenerate.py            # every script in scripts/ -> local.jsonl
    python tests/data/corpus/regenerate.py gb_logs_only rc_recompile_limit   # only these; others kept
    python tests/data/corpus/regenerate.py --gpu      # scripts_gpu/ -> local_gpu.jsonl (needs CUDA)
    python tests/data/corpus/regenerate.py --tuning   # scripts_tuning/ -> the tu-local-* samples of tuning.jsonl
    python tests/data/corpus/regenerate.py --tuning --gpu   # scripts_tuning_gpu/ -> tu-gpu-* (needs CUDA)

The tuning scripts render some tracebacks with `rich` (rich.traceback.install): run them with
rich importable. Their samples replace the earlier ones of the same scripts in tuning.jsonl; the
public-issue samples there are kept as they are.

Each script starts with header comments that say how to run it and what it shows:

    # label: <category>                 required: the expected classification
    # also: <category> <category>       optional: other defensible categories
    # subcategory: <text>               optional: what the failure is, more precisely
    # env: KEY=VALUE KEY=VALUE          optional: extra environment variables
    # python_flags: -X faulthandler     optional: interpreter flags
    # runs: 2                           optional: run it this many times, one sample per run
                                        (used to check that failure signatures are stable)
    # head: 15                          optional: keep only the first N lines (an excerpt cut the way
                                        people paste logs into issues)
    # tail: 5                           optional: keep only the last N lines (the exception and the
                                        line above it, as people paste them)

Every run gets a fresh working directory and a fresh TORCHINDUCTOR_CACHE_DIR, so two runs of a
script differ in temporary paths, PIDs, addresses and timings but not in the failure itself.
stdout and stderr are captured together (as ``2>&1`` would); output longer than MAX_LINES lines
keeps its first HEAD_LINES and last MAX_LINES - HEAD_LINES lines around a marker line (the way a
capped log keeps head and tail), so an exception printed before a long compiler log survives.
Machine-specific paths are replaced by neutral ones (the interpreter prefix by /opt/venv and
/usr/lib/python3.X, the scripts' folder by /home/user/repro) so the corpus holds no local paths;
/tmp paths are kept because they are part of what signatures must normalise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
SCRIPTS_GPU = HERE / "scripts_gpu"
SCRIPTS_TUNING = HERE / "scripts_tuning"
SCRIPTS_TUNING_GPU = HERE / "scripts_tuning_gpu"
ID_PREFIX = {SCRIPTS: "local-", SCRIPTS_GPU: "gpu-", SCRIPTS_TUNING: "tu-local-", SCRIPTS_TUNING_GPU: "tu-gpu-"}
MAX_LINES = 400
HEAD_LINES = 150
TIMEOUT_S = 300
REPRO_DIR = "/home/user/repro"


def _header(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        m = re.match(r"#\s*(\w+):\s*(.*)$", line)
        if m:
            key = m.group(1)
            fields[key] = m.group(2).strip()
        elif key and line.startswith("#   "):
            fields[key] += " " + line[1:].strip()
    return fields


def _torch_source(python: str, gpu: bool) -> str:
    code = "import torch; print(torch.__version__)"
    if gpu:
        code += "; print(torch.cuda.get_device_name())"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    parts = out.stdout.strip().splitlines()
    return f"local torch {parts[0]}" + (f" on {parts[1]}" if gpu else "")


def _scrub(text: str, workdir: str) -> str:
    """Replace machine-specific absolute paths by neutral ones."""
    paths = sysconfig.get_paths()
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    repls = [
        (paths["purelib"], f"/opt/venv/lib/{ver}/site-packages"),
        (str(Path(sys.prefix)), "/opt/venv"),
        (paths["stdlib"], f"/usr/lib/{ver}"),
        (str(Path(sys.base_prefix)), "/usr"),
        (str(Path(workdir).resolve()), REPRO_DIR),
        (workdir, REPRO_DIR),
        (str(SCRIPTS), REPRO_DIR),
        (str(SCRIPTS_GPU), REPRO_DIR),
        (str(SCRIPTS_TUNING), REPRO_DIR),
        (str(SCRIPTS_TUNING_GPU), REPRO_DIR),
        (str(HERE.parents[2]), "/home/user/project"),
    ]
    for old, new in repls:
        if old and old != "/":
            text = text.replace(old, new)
    return text


def _cut(text: str) -> str:
    lines = text.splitlines()
    if len(lines) <= MAX_LINES:
        return text
    tail = MAX_LINES - HEAD_LINES
    cut = len(lines) - MAX_LINES
    kept = [*lines[:HEAD_LINES], f"[... regenerate.py cut {cut} lines here ...]", *lines[-tail:]]
    return "\n".join(kept) + "\n"


def run_script(path: Path, python: str, run_no: int) -> dict:
    src = path.read_text()
    hdr = _header(src)
    env = dict(os.environ)
    for item in hdr.get("env", "").split():
        k, _, v = item.partition("=")
        env[k] = v
    env.pop("PYTHONFAULTHANDLER", None)
    env["PYTHONUNBUFFERED"] = "1"
    work = tempfile.mkdtemp(prefix="pt2bb_corpus_")
    cache = tempfile.mkdtemp(prefix="torchinductor_corpus_")
    env["TORCHINDUCTOR_CACHE_DIR"] = cache
    try:
        shutil.copy(path, Path(work) / path.name)
        argv = [python, *hdr.get("python_flags", "").split(), path.name]
        proc = subprocess.run(argv, cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
        text = _scrub(proc.stdout.decode("utf-8", errors="replace"), work)
        if hdr.get("head"):
            text = "\n".join(text.splitlines()[:int(hdr["head"])]) + "\n"
        if hdr.get("tail"):
            text = "\n".join(text.splitlines()[-int(hdr["tail"]):]) + "\n"
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    rc = proc.returncode
    sig = None
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
    prefix = ID_PREFIX[path.parent]
    return {
        "id": f"{prefix}{path.stem}" + (f"-run{run_no}" if run_no > 1 else ""),
        "source": "",  # filled by main()
        "url": None,
        "label": hdr["label"],
        "also": hdr.get("also", "").split(),
        "subcategory": hdr.get("subcategory", ""),
        "text": _cut(text),
        "notes": f"produced by {path.parent.name}/{path.name}"
        + (f" with {hdr['env']}" if hdr.get("env") else "")
        + (f", first {hdr['head']} lines kept" if hdr.get("head") else "")
        + (f", last {hdr['tail']} lines kept" if hdr.get("tail") else ""),
        "hard_case": False,
        "script_name": path.name,
        "script": src,
        "env": hdr.get("env", ""),
        "python_flags": hdr.get("python_flags", ""),
        "run": run_no,
        "exit_code": rc if rc >= 0 else None,
        "signal_name": sig,
    }


def main(argv: list[str]) -> int:
    python = sys.executable
    gpu = "--gpu" in argv
    tuning = "--tuning" in argv
    argv = [a for a in argv if a not in ("--gpu", "--tuning")]
    if tuning:
        scripts = SCRIPTS_TUNING_GPU if gpu else SCRIPTS_TUNING
        out_path = HERE / "tuning.jsonl"
    else:
        scripts = SCRIPTS_GPU if gpu else SCRIPTS
        out_path = HERE / ("local_gpu.jsonl" if gpu else "local.jsonl")
    source = _torch_source(python, gpu)
    wanted = {a.removesuffix(".py") for a in argv}
    existing: dict[str, dict] = {}
    if out_path.exists() and (wanted or tuning):
        for line in out_path.read_text().splitlines():
            if line.strip():
                d = json.loads(line)
                existing[d["id"]] = d
    samples: dict[str, dict] = {}
    if tuning:  # samples not made from this folder's scripts stay, in their order
        for sid, d in existing.items():
            if not sid.startswith(ID_PREFIX[scripts]):
                samples[sid] = d
    for path in sorted(scripts.glob("*.py")):
        if wanted and path.stem not in wanted:
            for sid, d in existing.items():
                if d.get("script_name") == path.name:
                    samples[sid] = d
            continue
        runs = int(_header(path.read_text()).get("runs", "1"))
        for run_no in range(1, runs + 1):
            rec = run_script(path, python, run_no)
            rec["source"] = source
            samples[rec["id"]] = rec
            last = rec["text"].strip().splitlines()[-1:] or [""]
            print(f"{rec['id']:<48} rc={rec['exit_code']} sig={rec['signal_name']} | {last[0][:90]}",
                  flush=True)
    with out_path.open("w") as fh:
        for rec in samples.values():
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"wrote {len(samples)} samples to {out_path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
