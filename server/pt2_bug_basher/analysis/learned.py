"""A guess learned from labelled error text, for text that neither the rules nor the fallback place.

The rules read exception lines and the fallback weighs frames, log sources and a short vocabulary.
Cut tracebacks and logs that hold no exception line still carry words that go with one kind of
failure more than another (the Dynamo variable trackers a graph break passes through, the shape-env
calls of a data-dependent guard, the launcher of a Triton kernel). This module learns those words
from the labelled corpus that ships with the package (`tests/data/corpus/*.jsonl`, every sample with its
public source): TF-IDF over words and word pairs, then a complement naive Bayes (scikit-learn), which
suits a few hundred short texts over nine classes better than the logistic regression it replaced (in
leave-one-batch-out runs over the held-out corpus its own top answer was right 219 times in 271, the
regression's 208). It answers on any text that shows a failure (``shows_a_failure``): "unknown" is never
right, and the confidence it reports (at most ``MAX_CONFIDENCE``, under the fallback's) says how much to
trust it: in those runs its answers with a probability under 0.15 were right about half the time, and
those over 0.3 nineteen times in twenty. The evidence lines are the text's lines whose words weigh most
for the class it chose (rule ``fallback:learned``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pt2_bug_basher.case.config import machine_cache_dir

from .failure import match_frame, strip_prefix

WINDOW = 64 * 1024  # characters read back from the end of the text, as the fallback does
MAX_CONFIDENCE = 0.2  # under the fallback's cap: a learned guess is the weakest evidence there is
MAX_EVIDENCE = 3
# a labelled report this close (cosine of the TF-IDF vectors) is named as similar: in leave-one-batch-out
# runs over the held-out corpus (bench_classify.py), the closest report at >= 0.6 had the label 41 times in 45
MIN_SIMILARITY = 0.6
MAX_SIMILAR = 3
TOKEN_PATTERN = r"[A-Za-z_][A-Za-z0-9_]{2,}"  # identifiers and words of three or more characters
_WORD = re.compile(TOKEN_PATTERN)
# a warning or error that torch logged (glog, as TORCH_LOGS prints, or a torch logger), or a word of failure
_FAILURE_OUTPUT = re.compile(
    r"^(?:\[rank\d+\]:)?[WEF]\d{4} [\d:.]+ +\d+ \S+\]"
    r"|\btorch\.[\w.]+: \[(?:WARNING|ERROR|CRITICAL)\]"
    r"|(?i:error|exception|fail|assert|traceback|warn|abort|fault|mismatch|\bnan\b|recompil|guard|unsupported)",
    re.MULTILINE)
# a line that starts printing a result: a tensor, an array, a list of numbers or a number, after an optional
# label, at the line's start (the further rows of one printed tensor are indented: they are not another result)
_PRINTED_RESULT = re.compile(r"^(?:[\w .()-]{0,40}[:=][^\S\n]*)?"
                             r"(?:tensor\(|array\(|\[+[^\S\n]*[-+]?(?:\d|inf\b|nan\b)|[-+]?\d[\d.e+-]*[^\S\n]*$)",
                             re.MULTILINE)
SMOOTHING_ALPHA = 1.0  # scikit-learn's default additive smoothing
# corpus files, in the order they are read; a sample labelled `other` has no class to learn
CORPUS_FILES = ("public.jsonl", "local.jsonl", "local_gpu.jsonl", "tuning.jsonl", "training.jsonl", "heldout.jsonl")
_PACKAGED_CORPUS = Path(__file__).resolve().parents[1] / "_data" / "corpus"
_CHECKOUT_CORPUS = Path(__file__).resolve().parents[3] / "tests" / "data" / "corpus"


@dataclass(frozen=True)
class LabelledText:
    sample_id: str
    label: str
    text: str
    url: str | None = None  # the public report the text comes from (none for locally produced failures)
    subcategory: str = ""


@dataclass(frozen=True)
class SimilarReport:
    url: str
    label: str
    subcategory: str
    similarity: float


@dataclass
class LearnedGuess:
    category: str
    probability: float
    runner_up: str
    confidence: float
    evidence: list[tuple[int, str]]  # (0-based line number, line): the lines that weigh most for the category


def corpus_dir() -> Path:
    """The labelled corpus: the wheel's copy, else the checkout's."""
    for candidate in (_PACKAGED_CORPUS, _CHECKOUT_CORPUS):
        if (candidate / CORPUS_FILES[0]).is_file():
            return candidate
    raise FileNotFoundError("the labelled error corpus is missing from this installation; reinstall pt2-bug-basher.")


def load_corpus(directory: Path | None = None) -> list[LabelledText]:
    """Every labelled sample of the corpus files (those present), `other` labels left out."""
    directory = directory or corpus_dir()
    samples = []
    for name in CORPUS_FILES:
        path = directory / name
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                if row["label"] != "other":
                    samples.append(LabelledText(row["id"], row["label"], row["text"], row.get("url"),
                                                row.get("subcategory", "")))
    return samples


def shows_a_failure(text: str) -> bool:
    """The text is output of a failing program: a traceback frame, a warning or error that torch logged, a
    word of failure, or two printed results (what a report of a wrong result shows). Code, prose, a single
    print and info logs are not guessed at."""
    tail = _tail(text)
    return (bool(_FAILURE_OUTPUT.search(tail)) or len(_PRINTED_RESULT.findall(tail)) >= 2
            or any(match_frame(strip_prefix(line)) for line in tail.split("\n")))


def _tail(text: str) -> str:
    return text[-WINDOW:]


def _read(text: str) -> str:
    """What the model reads: the tail window, each distinct line once (a progress line printed a thousand
    times must not drown the one frame that matters)."""
    return "\n".join(dict.fromkeys(_tail(text).split("\n")))


class TextModel:
    """TF-IDF and complement naive Bayes fitted on labelled error text."""

    def __init__(self, samples: Iterable[LabelledText]) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.naive_bayes import ComplementNB

        samples = list(samples)
        if len({s.label for s in samples}) < 2:
            raise ValueError("a text model needs samples of at least two labels")
        self.sample_ids = frozenset(s.sample_id for s in samples)
        self._vectorizer = TfidfVectorizer(token_pattern=TOKEN_PATTERN, ngram_range=(1, 2), sublinear_tf=True)
        features = self._vectorizer.fit_transform([_read(s.text) for s in samples])
        public = [i for i, s in enumerate(samples) if s.url]
        self._reports = [samples[i] for i in public]
        self._report_features = features[public]  # rows are L2-normalised: a dot product is the cosine
        self._classifier = ComplementNB(alpha=SMOOTHING_ALPHA)
        self._classifier.fit(features, [s.label for s in samples])
        self.classes: list[str] = [str(c) for c in self._classifier.classes_]

    def probabilities(self, text: str) -> dict[str, float]:
        row = self._classifier.predict_proba(self._vectorizer.transform([_read(text)]))[0]
        return {c: float(p) for c, p in zip(self.classes, row, strict=True)}

    def similar(self, text: str) -> list[SimilarReport]:
        """The labelled public reports whose text is closest to `text` (at least MIN_SIMILARITY), closest
        first, one per report."""
        if not self._reports or not _WORD.search(text):
            return []
        scores = (self._report_features @ self._vectorizer.transform([_read(text)]).T).toarray().ravel()
        found: dict[str, SimilarReport] = {}
        for i in scores.argsort()[::-1]:
            if scores[i] < MIN_SIMILARITY or len(found) == MAX_SIMILAR:
                break
            report = self._reports[i]
            assert report.url is not None
            found.setdefault(report.url, SimilarReport(report.url, report.label, report.subcategory,
                                                       round(float(scores[i]), 3)))
        return list(found.values())

    def guess(self, text: str) -> LearnedGuess | None:
        """The most probable category, or None for text that shows no failure."""
        if not shows_a_failure(text):
            return None
        ranked = sorted(self.probabilities(text).items(), key=lambda kv: -kv[1])
        (best, p), (runner_up, _) = ranked[0], ranked[1]
        confidence = round(max(0.05, MAX_CONFIDENCE * p), 3)
        return LearnedGuess(best, round(p, 3), runner_up, confidence, self._weighty_lines(text, best))

    def _weighty_lines(self, text: str, category: str) -> list[tuple[int, str]]:
        """The lines whose words push hardest toward `category` (each line scored on its own)."""
        tail = _tail(text)
        first_line_no = text.count("\n", 0, len(text) - len(tail))
        lines = tail.split("\n")
        # a line is scored on what it says after a log prefix, and only if it says some word
        said = [(i, line, strip_prefix(line)) for i, line in enumerate(lines)]
        candidates = [(i, line, words) for i, line, words in said if _WORD.search(words)]
        if not candidates:
            return []
        features = self._vectorizer.transform([words for _, _, words in candidates])
        # a word weighs for a class as much as its weight there exceeds its mean weight over all classes
        weights: Any = self._classifier.feature_log_prob_
        column = weights[self.classes.index(category)] - weights.mean(axis=0)
        scores = features @ column
        order = sorted(range(len(candidates)), key=lambda k: -scores[k])
        return [(first_line_no + candidates[k][0], candidates[k][1]) for k in order[:MAX_EVIDENCE] if scores[k] > 0]


def similar_reports(text: str) -> list[SimilarReport]:
    """The default model's similar reports; none where the corpus or scikit-learn is missing."""
    if not shows_a_failure(text):
        return []
    try:
        return default_model().similar(text)
    except (ImportError, FileNotFoundError):
        return []


@functools.cache
def default_model() -> TextModel:
    """The model fitted on the whole packaged corpus, once per machine and corpus: fitting takes seconds,
    and every command-line call is a new process, so the fitted model is kept in the cache directory
    (``machine_cache_dir()``) under a name that changes with the corpus, the settings and scikit-learn."""
    directory = corpus_dir()
    path = machine_cache_dir() / f"text-model-{_model_key(directory)}.pickle"
    try:
        model = pickle.loads(path.read_bytes())
        if isinstance(model, TextModel):
            return model
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        pass  # absent, cut short by a crash, or written by another version: fit again
    model = TextModel(load_corpus(directory))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as tmp:
            tmp.write(pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp.name, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:
        pass  # a read-only cache costs a fit per process, nothing else
    return model


def _model_key(directory: Path) -> str:
    """Changes with the corpus files, the model's settings and scikit-learn's version."""
    import sklearn

    digest = hashlib.sha256()
    settings = ("ComplementNB", TOKEN_PATTERN, SMOOTHING_ALPHA, MIN_SIMILARITY, sklearn.__version__, CORPUS_FILES)
    digest.update(repr(settings).encode())
    for name in CORPUS_FILES:
        path = directory / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"") + b"\0")
    return digest.hexdigest()[:16]
