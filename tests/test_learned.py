"""The learned guess (analysis/learned.py): fitted on the labelled corpus, asked only about text nothing else places."""

from __future__ import annotations

import functools

import pytest
from corpus_samples import CORPUS, HELDOUT, TUNING

from pt2_bug_basher.analysis import learned
from pt2_bug_basher.analysis.classify import classify, guessed
from pt2_bug_basher.analysis.learned import LabelledText, TextModel, load_corpus
from pt2_bug_basher.case.config import CACHE_DIR_ENV

TUNING_BY_ID = {d["id"]: d for d in TUNING}
# tracebacks rendered by rich (scripts_tuning/), cut above their exception line: no rule and not the
# fallback place them (test_classify checks that), so only the words of the frames are left
RICH_CUTS = [("tu-local-rich_rc_stance", "RuntimeError: Detected recompile", "recompile"),
             ("tu-local-rich_acc_assert_close", "AssertionError", "accuracy")]


def _cut_before(text: str, needle: str) -> str:
    at = text.rfind(needle)
    assert at >= 0, needle
    return text[:text.rfind("\n", 0, at)]


@functools.cache
def model_without(sample_id: str) -> TextModel:
    """A model that never saw the sample: what it says about it is a guess, not a memory."""
    return TextModel(s for s in load_corpus(CORPUS) if s.sample_id != sample_id)


@pytest.mark.parametrize(("sample_id", "needle", "category"), RICH_CUTS)
def test_a_cut_traceback_no_rule_places_is_guessed_from_its_words(sample_id: str, needle: str, category: str) -> None:
    cut = _cut_before(TUNING_BY_ID[sample_id]["text"], needle)
    assert classify(cut, text_model=None).category == "unknown"
    model = model_without(sample_id)
    assert sample_id not in model.sample_ids
    c = classify(cut, text_model=model)
    assert c.category == category, model.probabilities(cut)
    # a guess, weaker than any rule or the fallback, and it says which lines weighed most
    assert guessed(c) and 0.05 <= c.confidence <= learned.MAX_CONFIDENCE
    assert c.evidence and {e.rule for e in c.evidence} == {"fallback:learned"}
    # the phase is what the frames show (as for unknown text), not the guessed category's usual phase
    assert c.phase == classify(cut, text_model=None).phase
    lines = cut.split("\n")
    for e in c.evidence:
        assert lines[e.line_no - 1].startswith(e.text)


def test_evidence_line_numbers_count_the_lines_before_the_window() -> None:
    sample_id, needle, category = RICH_CUTS[0]
    cut = _cut_before(TUNING_BY_ID[sample_id]["text"], needle)
    noise = "loading shard\n" * (learned.WINDOW // len("loading shard\n") + 100)
    c = classify(noise + cut, text_model=model_without(sample_id))
    assert c.category == category
    lines = (noise + cut).split("\n")
    assert c.evidence and all(lines[e.line_no - 1].startswith(e.text) for e in c.evidence)
    assert all(e.line_no > noise.count("\n") for e in c.evidence)


@pytest.mark.parametrize("text", [
    "",
    "out = torch.compile(model, backend='eager')(x)\nprint(out)\n",  # code
    "calling function: 'forward' of the model\n",  # prose
    "loss: tensor(0.2345)\nstep 10 done\n",  # plain prints
    # an info log that every compile prints
    "[2023-12-18 18:21:07,432] torch._dynamo.symbolic_convert: [INFO] Step 1: torchdynamo start tracing f\n",
    "I1010 19:42:27.597000 1480278 torch/_dynamo/convert_frame.py:1000] [0/0] Step 1: torchdynamo start tracing\n",
])
def test_text_that_shows_no_failure_is_not_guessed_at(text: str) -> None:
    assert not learned.shows_a_failure(text)
    assert learned.default_model().guess(text) is None
    assert classify(text).category == "unknown"


def test_the_output_of_a_run_that_passed_is_not_guessed_at() -> None:
    sample_id, needle, category = RICH_CUTS[0]
    cut = _cut_before(TUNING_BY_ID[sample_id]["text"], needle)
    model = model_without(sample_id)
    assert classify(cut, exit_code=1, text_model=model).category == category
    assert classify(cut, exit_code=0, text_model=model).category == "unknown"


def test_the_default_model_is_fitted_on_every_labelled_sample_of_the_corpus() -> None:
    samples = load_corpus()
    ids = {s.sample_id for s in samples}
    assert learned.corpus_dir().resolve() == CORPUS.resolve()
    assert learned.default_model().sample_ids == ids
    # every corpus file is read, and a sample labelled `other` has no class to learn
    assert {i.split("-")[0] for i in ids} >= {"local", "gpu", "tu", "ho9"}
    assert not any(s.label == "other" for s in samples)
    assert set(learned.default_model().classes) == {s.label for s in samples}


def test_a_model_needs_two_labels() -> None:
    with pytest.raises(ValueError, match="two labels"):
        TextModel([LabelledText("a", "recompile", "Recompiling function f"),
                    LabelledText("b", "recompile", "Recompiling function g")])
    two = TextModel([LabelledText("a", "recompile", "Recompiling function f guard failed"),
                     LabelledText("b", "triton", "triton kernel launcher failed XBLOCK")])
    guess = two.guess("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\ntriton XBLOCK launcher\n")
    assert guess is not None and guess.category == "triton" and guess.runner_up == "recompile"
    assert guess.evidence and "XBLOCK" in guess.evidence[0][1]


def test_similar_reports_name_the_public_report_whose_text_is_closest() -> None:
    sample = next(d for d in HELDOUT if d["id"] == "ho-ds-01")
    text = sample["text"]
    found = learned.default_model().similar(text)
    assert found[0].url == sample["url"] and found[0].label == "dynamic_shapes" and found[0].similarity > 0.99
    assert len({r.url for r in found}) == len(found) <= learned.MAX_SIMILAR
    assert all(r.similarity >= learned.MIN_SIMILARITY for r in found)
    # the same failure with other names and sizes still reads like it
    renamed = text.replace("inputs", "batch").replace("(2)", "(16)")
    assert learned.default_model().similar(renamed)[0].url == sample["url"]
    assert learned.similar_reports("the model trains fine and the loss goes down") == []


def test_only_public_reports_are_named_as_similar() -> None:
    model = TextModel([LabelledText("a", "recompile", "Recompiling function f guard failed", None),
                       LabelledText("b", "triton", "triton kernel launcher failed XBLOCK", "https://x/issues/2",
                                    "launcher")])
    assert model.similar("Recompiling function f guard failed") == []
    (report,) = model.similar("triton kernel launcher failed XBLOCK")
    assert (report.url, report.label, report.subcategory) == ("https://x/issues/2", "triton", "launcher")


def test_the_default_model_is_fitted_once_and_then_loaded_from_the_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    learned.default_model.cache_clear()
    try:
        fitted = learned.default_model()
        (saved,) = tmp_path.glob("text-model-*.pickle")
        learned.default_model.cache_clear()
        loaded = learned.default_model()
        assert loaded is not fitted and loaded.sample_ids == fitted.sample_ids
        text = TUNING_BY_ID["tu-local-rich_rc_stance"]["text"]
        assert loaded.probabilities(text) == fitted.probabilities(text)
        # a file cut short (a crash while writing) is fitted again and replaced
        saved.write_bytes(saved.read_bytes()[:100])
        learned.default_model.cache_clear()
        assert learned.default_model().probabilities(text) == fitted.probabilities(text)
        assert saved.stat().st_size > 1000
    finally:
        learned.default_model.cache_clear()


def test_an_exception_no_rule_knows_is_guessed_at_only_when_torch_raised_it() -> None:
    """A user's ValueError stays `unknown`, and so does a lone exception line; the same exception raised inside
    torch.fx (no rule reads that frame) is guessed at."""
    user = ("Traceback (most recent call last):\n"
            '  File "/repo/train.py", line 14, in <module>\n'
            "    out = model(x)\n"
            '  File "/repo/pkg/ops.py", line 3, in double\n'
            '    raise ValueError(f"double() cannot take {x}")\n'
            "ValueError: double() cannot take 21\n")
    assert classify(user, exit_code=1).category == "unknown"
    in_torch = user.replace("/repo/pkg/ops.py", "/venv/lib/python3.11/site-packages/torch/fx/graph.py")
    c = classify(in_torch, exit_code=1)
    assert c.category != "unknown" and guessed(c) and c.confidence <= learned.MAX_CONFIDENCE
    assert classify(in_torch, exit_code=1, text_model=None).category == "unknown"  # no rule places it
    # a lone exception line (a paste) has no frames to say whose it is: not guessed at, even one naming an op
    for lone in ("RuntimeError: expected scalar type Float but found Half in aten::mm\n",
                 "ValueError: double() cannot take 21\n"):
        assert classify(lone, exit_code=1).category == "unknown", lone


@pytest.mark.parametrize("text", [
    "tensor([3, 3], device='cuda:0')\ntensor([1, 1], device='cuda:0')\n",  # two results, unlabelled
    "[1, 2, 3]   # eager\n[1, 2, 5]   # inductor\n",  # labelled by a comment
    "ref: 0.4999\nres: 0.0894\n",
])
def test_two_printed_results_show_a_failure(text: str) -> None:
    """A report of a wrong result prints the two results; one print alone is no failure."""
    assert learned.shows_a_failure(text)
    c = classify(text)
    assert c.category != "unknown" and guessed(c)
    assert not learned.shows_a_failure(text.split("\n")[0] + "\nstep 10 done\n")


def test_one_printed_tensor_over_several_rows_is_one_result() -> None:
    """The further rows of a printed tensor are indented: one eager gradient printed alone shows no failure."""
    grad = "=== eager x.grad ===\ntensor([[0.1000, 0.2000],\n        [0.3000, 0.4000],\n        [0.5000, 0.6000]])\n"
    assert not learned.shows_a_failure(grad)
    assert learned.shows_a_failure(grad + grad.replace("eager", "compiled"))
