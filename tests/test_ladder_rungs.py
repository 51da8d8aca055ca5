"""The ladder's rungs are rows of RUNGS and SHAPES: each row has an example here, fired without running torch.

Adding a rung is one row in reduce/ladder.py plus one example below."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import anyio
import pytest

from pt2_bug_basher.playbooks import EXPORT, LAYERS
from pt2_bug_basher.reduce.ladder import (
    BACKENDS,
    LAUNCHER,
    RUNGS,
    SHAPE_RUNGS,
    SHAPES,
    LadderRow,
    Reference,
    Rung,
    ShapesReading,
    _Ladder,
    first_failing,
    layer_reading,
    rung_argv,
    shapes_reading,
)

# backend -> (the case's category, the backend rows' outcomes lowest first, the minifier's (mode, after))
RUNG_EXAMPLES: dict[str, tuple[str, tuple[str, ...], tuple[str, str | None]]] = {
    "eager": ("graph_break", ("same failure", "skipped", "skipped", "skipped"), ("source", None)),
    "aot_eager": ("unknown", ("passes", "same failure", "skipped", "skipped"), ("fx", "dynamo")),
    "aot_eager_decomp_partition": ("accuracy", ("passes", "different failure", "same failure", "skipped"),
                                   ("fx", "dynamo")),
    "inductor": ("backend_compiler_failed", ("passes", "passes", "passes", "same failure"), ("fx", "aot")),
}

# (dynamic=False fails the case's way, dynamic=True does) -> (their outcomes, a fragment of what they say)
SHAPE_EXAMPLES: dict[tuple[bool, bool], tuple[str, str, str]] = {
    (False, True): ("passes", "same failure", "fixed by static shapes"),
    (True, False): ("same failure", "different failure", "fails only with static shapes (dynamic=True different "
                                                        "failure)"),
    (True, True): ("same failure", "same failure", "not a dynamic-shapes problem"),
    (False, False): ("passes", "timeout", "compare the two rows"),
}


def _row(backend: str, outcome: str, dynamic: str = "script") -> LadderRow:
    return LadderRow(backend=backend, dynamic=dynamic, outcome=outcome, run_id="r", seconds=0.0)


def _launcher():
    """The launcher probe (it imports torch only once it patches, which nothing here does)."""
    spec = importlib.util.spec_from_file_location("pt2bb_launcher_under_test", LAUNCHER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ladder(tmp_path: Path) -> _Ladder:
    ref = Reference(case_id="c", script=tmp_path / "repro.py", args=[], signature=None, category="unknown",
                    exception_type=None, message=None, env={}, duration_s=1.0, run_ids=[])
    return _Ladder(None, None, ref, ref.script, None, tmp_path, anyio.CapacityLimiter(1), None,  # type: ignore[arg-type]
                   None)


def test_every_row_has_an_example():
    assert set(RUNG_EXAMPLES) == set(BACKENDS) and len(BACKENDS) == len(RUNGS)
    assert set(SHAPE_EXAMPLES) == {(r.static_fails, r.dynamic_fails) for r in SHAPES} and len(SHAPES) == 4


@pytest.mark.anyio
@pytest.mark.parametrize("rung", RUNGS, ids=lambda r: r.backend)
async def test_a_backend_rung_that_fails_lowest_names_its_layer(rung: Rung, tmp_path: Path):
    category, outcomes, reducer = RUNG_EXAMPLES[rung.backend]
    table = [_row(b, o) for b, o in zip(BACKENDS, outcomes, strict=True)]
    assert first_failing(table) == rung.backend
    assert layer_reading(rung.backend, False, category) == (rung.layer, rung.meaning, reducer)
    assert rung.layer in LAYERS and rung.backend in rung.meaning  # the playbook and source files follow the layer
    # the swap as the launcher reads it: this backend, dynamic as the script sets it
    launcher = _launcher()
    argv = rung_argv("python", tmp_path / "repro.py", ["--n", "2"], rung.backend, "script")
    assert argv[:4] == ["python", str(LAUNCHER), "--backend", rung.backend]
    assert argv[4:] == ["--", str(tmp_path / "repro.py"), "--n", "2"]
    for dynamic, forced in zip(SHAPE_RUNGS, (False, True), strict=True):
        shaped = rung_argv("python", tmp_path / "repro.py", [], rung.backend, dynamic)
        assert launcher._parse_dynamic(shaped[shaped.index("--dynamic") + 1]) is forced
    # once it fails the case's way and those below did not, the rungs above it are stopped
    ladder = _ladder(tmp_path)
    ladder.scopes = {(b, "script"): anyio.CancelScope() for b in BACKENDS}
    lowest = BACKENDS.index(rung.backend)
    ladder.rows = {(b, "script"): row for b, row in zip(BACKENDS[:lowest + 1], table, strict=False)}
    ladder.skip_above_first_failing()
    assert [b for b in BACKENDS if ladder.scopes[(b, "script")].cancel_called] == list(BACKENDS[lowest + 1:])


@pytest.mark.parametrize("reading", SHAPES, ids=lambda r: f"static={r.static_fails}-dynamic={r.dynamic_fails}")
def test_the_dynamic_rungs_read_as_their_row(reading: ShapesReading):
    static, dynamic, fragment = SHAPE_EXAMPLES[(reading.static_fails, reading.dynamic_fails)]
    text = shapes_reading(_row("inductor", static, "False"), _row("inductor", dynamic, "True"))
    assert text == reading.text.format(dynamic=dynamic) and fragment in text


def test_no_rung_failing_is_export_or_unknown():
    assert first_failing([_row(b, "not compiled") for b in BACKENDS]) is None
    assert layer_reading(None, True, "export")[::2] == (EXPORT, ("source", None))
    # export drives Dynamo (torch.cond), AOTAutograd and the decompositions: the ladder does not say it is export's
    assert "Dynamo for torch.cond" in layer_reading(None, True, "export")[1]
    assert layer_reading(None, False, "accuracy")[::2] == ("unknown", ("source", None))
