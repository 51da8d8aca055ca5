"""classify(): speed on a 1 MB log and accuracy on the corpus, against a naive baseline.

The 1 MB logs are built from real output: noise lines taken from the corpus (warnings, progress
and debug-log lines that name no failure), then a real failure from tests/data/corpus/local.jsonl
(or the failure first and the noise after it). Each log is classified N times by classify() and
by a naive classifier measured side by side in the same run: for every rule, its literal phrases
as one regex `re.search`ed over the whole text; the category with the largest summed weight wins
(no traceback parsing, no tail window, no per-line patterns). Prints ms/call and ratio = ours / naive, then per-category
precision / recall / F1 on each corpus for both: the development corpora (public, local,
local_gpu, tuning) and the held-out one (heldout.jsonl, never tuned on: its first two batches,
each later batch by its id prefix, the excerpts that hold the decisive line and those that do not
(`hard_case`), and all of it) separately, with how often ours answers (not `unknown`) and how often
an answer is right. A class that is predicted but never a label still gets a row (its precision;
recall is undefined there and printed as nan).

    python bench/bench_classify.py [--calls 30] [--accuracy-only]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from pt2_bug_basher.analysis.classify import CATEGORIES, RULES, classify  # noqa: E402
from pt2_bug_basher.analysis.learned import TextModel, load_corpus  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "corpus"
SEVEN = {"graph_break", "backend_compiler_failed", "recompile", "accuracy", "dynamo_internal",
         "runtime_crash", "triton"}
# labels a prediction is scored against by name; an "other" label accepts any category outside SEVEN
NAMED = SEVEN | {"dynamic_shapes", "export"}
TARGET = 1_000_000

# Neutral lines that appear in real runs (from the corpus): they name no failure.
NOISE_LINES = [
    "/usr/local/lib/python3.10/dist-packages/torch/onnx/_internal/exporter.py:130: UserWarning: torch.onnx."
    "dynamo_export only implements opset version 18 for now. If you need to use a different opset version, "
    "please register them with register_custom_op.",
    "  warnings.warn(",
    "loading model: 0it [00:00, ?it/s]",
    "DEBUG    torch.__trace:utils.py:2350 ",
    "DEBUG    torch.__trace:structured.py:28 ",
    "DEBUG    torch.__trace:meta_utils.py:514 ",
    "skipping cudagraphs for unknown reason",
    "Running 1 items in this shard",
    "y = torch.Size([4])",
]


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (CORPUS / name).read_text().splitlines() if line.strip()]


def noise(size: int) -> str:
    out: list[str] = []
    n = 0
    i = 0
    while n < size:
        line = NOISE_LINES[i % len(NOISE_LINES)] + "\n"
        out.append(line)
        n += len(line)
        i += 1
    return "".join(out)[:size].rsplit("\n", 1)[0] + "\n"


# --------------------------------------------------------------------------------------------
# Naive baseline: every rule pattern searched over the whole text


def _naive_rules() -> list[tuple[re.Pattern[str], str, float]]:
    """One regex per rule: the rule's literal anchors as an alternation (what a first version of
    a classifier does: grep the whole log for known phrases)."""
    return [(re.compile("|".join(re.escape(a) for a in r.anchors)), r.category, r.weight) for r in RULES]


NAIVE = _naive_rules()


def naive_classify(text: str) -> str:
    scores = dict.fromkeys(CATEGORIES, 0.0)
    for pat, cat, w in NAIVE:
        if pat.search(text):
            scores[cat] += w
    best = max(scores, key=lambda c: scores[c])
    return best if scores[best] > 0 else "unknown"


# --------------------------------------------------------------------------------------------


def time_calls(fn, n: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU (thread) milliseconds of n calls, after one warm-up call. On a busy
    machine the CPU time is the steadier number: it leaves out time spent waiting for a core."""
    fn()
    wall, cpu = [], []
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
    return wall, cpu


def _batch(d: dict) -> str:
    """A held-out sample's batch: the prefix of its id (`ho7-gb-01` -> `ho7`)."""
    return d["id"].split("-", 1)[0]


def is_right(d: dict, category: str) -> bool:
    accepted = {d["label"], *d.get("also", [])}
    return category in accepted or ("other" in accepted and category not in SEVEN)


def pred_class(category: str) -> str:
    return category if category in NAMED else "other"


def table(name: str, samples: list[dict], preds_ours: list[str], preds_naive: list[str],
          preds_rules: list[str]) -> None:
    def metrics(preds: list[str], label: str) -> tuple[float, float, float, int]:
        labelled = [(d, p) for d, p in zip(samples, preds, strict=True) if d["label"] == label]
        predicted = [(d, p) for d, p in zip(samples, preds, strict=True) if pred_class(p) == pred_class(label)]
        rec = sum(is_right(d, p) for d, p in labelled) / len(labelled) if labelled else float("nan")
        prec = sum(is_right(d, p) for d, p in predicted) / len(predicted) if predicted else float("nan")
        f1 = (2 * prec * rec / (prec + rec) if (prec + rec) else 0.0) if predicted and labelled else float("nan")
        return prec, rec, f1, len(labelled)

    acc_o = sum(is_right(d, p) for d, p in zip(samples, preds_ours, strict=True)) / len(samples)
    acc_n = sum(is_right(d, p) for d, p in zip(samples, preds_naive, strict=True)) / len(samples)
    answered = [(d, p) for d, p in zip(samples, preds_ours, strict=True) if p != "unknown"]
    precision = sum(is_right(d, p) for d, p in answered) / len(answered) if answered else float("nan")
    print(f"\n{name}: {len(samples)} samples   accuracy ours {acc_o:.3f}   naive {acc_n:.3f}   "
          f"ours answered {len(answered)}/{len(samples)}, right when answering {precision:.3f}")
    right_rules = sum(is_right(d, p) for d, p in zip(samples, preds_rules, strict=True))
    right_ours = sum(is_right(d, p) for d, p in zip(samples, preds_ours, strict=True))
    print(f"  right: {right_ours}/{len(samples)}; without the learned guess {right_rules}/{len(samples)} "
          f"({right_rules / len(samples):.3f})")
    print(f"  {'label':<24} {'n':>3}   {'P':>5} {'R':>5} {'F1':>5}   | naive {'P':>5} {'R':>5} {'F1':>5}")
    # every labelled class, and every class predicted without being a label (its precision counts too)
    classes = {d["label"] for d in samples} | {pred_class(p) for p in preds_ours + preds_naive}
    for label in sorted(classes):
        p, r, f, n = metrics(preds_ours, label)
        pn, rn, fn_, _ = metrics(preds_naive, label)
        print(f"  {label:<24} {n:>3}   {p:5.2f} {r:5.2f} {f:5.2f}   |       {pn:5.2f} {rn:5.2f} {fn_:5.2f}")
    wrong = [(d["id"], d["label"], p) for d, p in zip(samples, preds_ours, strict=True) if not is_right(d, p)]
    for sid, label, p in wrong:
        print(f"  miss: {sid} label={label} got={p}")


def time_big_logs(calls: int, local: list[dict]) -> None:
    by_id = {d["id"]: d for d in local}
    loadavg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"classify() on ~1 MB logs, {calls} calls each; {os.cpu_count()} cores, load average {loadavg:.2f}")
    print("  ms per call, median: wall-clock (CPU time)")
    print(f"  {'log':<46} {'ours':>14} {'naive':>16} {'ratio':>6}  result")
    ratios, ours_wall, ours_cpu, naive_wall, naive_cpu = [], [], [], [], []
    cases = []
    for sid in ("local-gb_fullgraph_print", "local-bcf_inductor_cpp_compile_error", "local-rc_recompile_limit",
                "local-acc_repro_level4", "local-rt_segfault_faulthandler", "local-exp_nonstrict_data_dependent",
                "local-gb_logs_only"):
        d = by_id[sid]
        cases.append((f"noise + {sid.removeprefix('local-')}", noise(TARGET - len(d["text"])) + d["text"], d))
    d = by_id["local-gb_logs_only"]
    cases.append(("gb_logs_only + noise after it", d["text"] + noise(TARGET - len(d["text"])), d))
    cases.append(("noise only (exit 0)", noise(TARGET), None))
    for name, text, d in cases:
        exit_code = d.get("exit_code") if d else 0
        sig = d.get("signal_name") if d else None
        ow, oc = time_calls(lambda text=text, exit_code=exit_code, sig=sig: classify(text, exit_code, sig), calls)
        nw, nc = time_calls(lambda text=text: naive_classify(text), max(3, calls // 5))
        got = classify(text, exit_code, sig).category
        want = d["label"] if d else "unknown"
        ratio = statistics.median(oc) / statistics.median(nc)
        ratios.append(ratio)
        ours_wall += ow
        ours_cpu += oc
        naive_wall += nw
        naive_cpu += nc
        print(f"  {name:<46} {statistics.median(ow):5.2f} ({statistics.median(oc):5.2f}) "
              f"{statistics.median(nw):6.1f} ({statistics.median(nc):6.1f}) {ratio:6.3f}  "
              f"{got}{'' if got == want else ' (WRONG, want ' + want + ')'}  naive={naive_classify(text)}")
    print(f"  {'all logs':<46} {statistics.median(ours_wall):5.2f} ({statistics.median(ours_cpu):5.2f}) "
          f"{statistics.median(naive_wall):6.1f} ({statistics.median(naive_cpu):6.1f})")
    print(f"  ratio = ours / naive (CPU time, median over logs): {statistics.median(ratios):.3f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--accuracy-only", action="store_true", help="skip the 1 MB timing, print the corpus tables")
    args = ap.parse_args()

    public, local, local_gpu = load("public.jsonl"), load("local.jsonl"), load("local_gpu.jsonl")
    tuning, training, heldout = load("tuning.jsonl"), load("training.jsonl"), load("heldout.jsonl")

    if not args.accuracy_only:
        time_big_logs(args.calls, local)
    corpora = (("public", public), ("local", local), ("local_gpu", local_gpu), ("tuning", tuning),
               ("tuning, all (public + local + local_gpu + tuning)", public + local + local_gpu + tuning),
               ("training (the learned guess learns from it; rules are not held to it)", training),
               ("heldout, first two batches (ho-, ho2-)", [d for d in heldout if _batch(d) in ("ho", "ho2")]),
               *((f"heldout, batch {prefix}-", [d for d in heldout if _batch(d) == prefix])
                 for prefix in sorted({_batch(d) for d in heldout} - {"ho", "ho2"}, key=lambda p: int(p[2:]))),
               ("heldout with the decisive line (hard_case false)", [d for d in heldout if not d["hard_case"]]),
               ("heldout without it (hard_case true: cut before the exception line, or misleading)",
                [d for d in heldout if d["hard_case"]]),
               ("heldout, all (never tuned on)", heldout))
    groups = {d["id"]: group for group, samples in (("public", public), ("local", local), ("local_gpu", local_gpu),
                                                      ("tuning", tuning), ("training", training)) for d in samples}
    groups.update({d["id"]: _batch(d) for d in heldout})
    models = models_leaving_out(groups)
    answers: dict[str, str] = {}
    for name, samples in corpora:
        ours = [classify(d["text"], d.get("exit_code"), d.get("signal_name"),
                         text_model=models[groups[d["id"]]]).category for d in samples]
        answers.update((d["id"], category) for d, category in zip(samples, ours, strict=True))
        rules = [classify(d["text"], d.get("exit_code"), d.get("signal_name"), text_model=None).category
                 for d in samples]
        naive = [naive_classify(d["text"]) for d in samples]
        table(name, samples, ours, naive, rules)
    similar_reports_figure(heldout, groups, models)
    second_reader_figure(heldout, answers)
    return 0


def second_reader_figure(heldout: list[dict], answers: dict[str, str]) -> None:
    """How a second reader, given only the texts, labelled the same held-out excerpts (second_reader.jsonl): what
    the text alone lets a careful reader get right, beside this tool on the same excerpts."""
    by_id = {d["id"]: d for d in heldout}
    readers: dict[str, dict[str, str]] = {}
    for row in load("second_reader.jsonl"):
        readers.setdefault(row["reader"], {})[row["id"]] = row["label"]
    for reader, labels in sorted(readers.items()):
        for part, keep in (("all", lambda d: True), ("with the decisive line", lambda d: not d["hard_case"]),
                           ("without it", lambda d: d["hard_case"])):
            ids = [i for i in labels if keep(by_id[i])]
            theirs = sum(is_right(by_id[i], labels[i]) for i in ids)
            ours = sum(is_right(by_id[i], answers[i]) for i in ids)
            print(f"second reader {reader} on {len(ids)} held-out excerpts ({part}): reader {theirs}/{len(ids)} "
                  f"({theirs / len(ids):.3f}), ours {ours}/{len(ids)} ({ours / len(ids):.3f})")


def similar_reports_figure(heldout: list[dict], groups: dict[str, str], models: dict[str, TextModel]) -> None:
    """How often classify_error's similar_reports names a report for held-out text, and how often the
    closest one has the text's label (each sample asked of the model that never saw its batch)."""
    named = agree = 0
    for d in heldout:
        found = models[groups[d["id"]]].similar(d["text"])
        if found:
            named += 1
            agree += is_right(d, found[0].label)
    print(f"\nsimilar reports on held-out text: named for {named}/{len(heldout)}; the closest one's label is "
          f"the text's for {agree}/{named}")


def models_leaving_out(groups: dict[str, str]) -> dict[str, TextModel]:
    """One learned model per group (a development file or a held-out batch), fitted on every other group:
    a sample is only ever guessed at by a model that never saw its group."""
    corpus = load_corpus(CORPUS)
    return {group: TextModel(s for s in corpus if groups[s.sample_id] != group)
            for group in sorted(set(groups.values()))}


if __name__ == "__main__":
    raise SystemExit(main())
