"""One source per fact: the category table (playbooks.py) against the prompts and SKILL.md, and the
step table (workflow.STEPS) against the server instructions, SKILL.md and README.md."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

from pt2_bug_basher.analysis.classify import CATEGORIES
from pt2_bug_basher.analysis.torch_logs import PRESET_ENV, PRESET_INDUCTOR_CONFIG, PRESETS, resolve_logs
from pt2_bug_basher.case.workflow import STEPS
from pt2_bug_basher.content import parse_frontmatter
from pt2_bug_basher.docsync import diagnostic_text
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.mcp_server.server import INSTRUCTIONS
from pt2_bug_basher.playbooks import PLAYBOOKS, guide

# What TORCH_COMPILE_DEBUG writes that step 8 reads (artifacts/collect.py indexes these).
DEBUG_FILES = {"fx_graph_readable.py", "fx_graph_transformed.py", "fx_graph_runnable.py", "ir_pre_fusion.txt",
               "ir_post_fusion.txt", "output_code.py", "torchdynamo/debug.log"}
PROMPTS = REPO_ROOT / "prompts" / "categories"
SKILL = REPO_ROOT / "skill" / "SKILL.md"


# --------------------------------------------------------------------------------------------
# The category table


def test_docs_generated_from_the_category_table_are_current():
    out = subprocess.run([sys.executable, "-m", "pt2_bug_basher.docsync", "--check"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_a_changed_table_makes_the_check_fail(tmp_path, monkeypatch):
    from pt2_bug_basher import docsync

    (tmp_path / "prompts" / "categories").mkdir(parents=True)
    (tmp_path / "skill").mkdir()
    for category in PLAYBOOKS:
        (tmp_path / "prompts" / "categories" / f"{category}.md").write_text((PROMPTS / f"{category}.md").read_text())
    (tmp_path / "skill" / "SKILL.md").write_text(SKILL.read_text())
    assert docsync.stale(tmp_path) == []
    changed = dict(PLAYBOOKS)
    changed["export"] = changed["export"].model_copy(update={"logs": "export,dynamic"})
    monkeypatch.setattr(docsync, "PLAYBOOKS", changed)
    assert {p.name for p in docsync.stale(tmp_path)} == {"export.md", "SKILL.md"}
    assert docsync.main(["--root", str(tmp_path)]) == 0 and docsync.stale(tmp_path) == []
    assert "| `+export,dynamic` |" not in (tmp_path / "skill" / "SKILL.md").read_text()


def test_the_table_covers_every_category_and_feeds_the_presets():
    assert list(PLAYBOOKS) and set(PLAYBOOKS) == set(CATEGORIES)
    for category, playbook in PLAYBOOKS.items():
        if playbook.logs is None:  # not a compiler failure (user_error): no logs apply, and none is offered
            assert category not in PRESETS and guide(category).log_preset is None
            assert playbook.diagnostic.arguments.get("logs") is None
            with pytest.raises(InvalidInput):
                resolve_logs(category, [], [])
            continue
        assert PRESETS[category] == playbook.logs
        assert PRESET_ENV.get(category, {}) == playbook.env
        assert PRESET_INDUCTOR_CONFIG.get(category, {}) == playbook.inductor_config
        assert resolve_logs(category, [], []) == playbook.logs  # every category is a preset run_with_logs takes
        assert guide(category).log_preset == playbook.logs
        assert guide(category).minify_level == playbook.minify.level


@pytest.mark.parametrize("category", list(PLAYBOOKS))
def test_each_row_is_consistent(category):
    playbook = PLAYBOOKS[category]
    names = {entry.lstrip("+-") for entry in (playbook.logs or "").split(",") if entry}
    for item in playbook.read_first:
        assert item in names or item in DEBUG_FILES, f"{category}: {item} is neither in its preset nor a debug file"
    plan = playbook.minify
    assert (plan.after is not None) == (plan.mode == "fx")
    assert (plan.level is not None) == (plan.mode != "source")
    if playbook.logs is None:  # not a compiler failure: no regression test belongs in PyTorch
        assert playbook.test_files == [] and playbook.source_files == []
    else:
        assert playbook.test_files
    assert all(t.startswith("test/") and t.endswith(".py") for t in playbook.test_files)
    assert not any(t.endswith("test_misc.py") for t in playbook.test_files)
    assert all(f.startswith("torch/") for f in playbook.source_files)


def test_the_minifier_picks_what_the_table_says():
    from pt2_bug_basher.reduce.minify import _FX_CATEGORIES

    assert {c: p.minify.after for c, p in PLAYBOOKS.items() if p.minify.mode == "fx"} == _FX_CATEGORIES


@pytest.mark.parametrize("category", list(PLAYBOOKS))
def test_each_prompt_agrees_with_its_row(category):
    meta, body = parse_frontmatter((PROMPTS / f"{category}.md").read_text())
    playbook = PLAYBOOKS[category]
    assert meta["category"] == category and meta["log_preset"] == playbook.logs
    assert meta["preset_env"] == playbook.env and meta["minify"].get("level") == playbook.minify.level
    assert meta["test_files"] == playbook.test_files and meta["source_files"] == playbook.source_files
    # the prose names the same first diagnostic, and only logs= values run_with_logs takes
    first = body.split("**First diagnostic.**", 1)[1].split("\n\n", 1)[0]
    assert diagnostic_text(playbook) in first, first
    for value in re.findall(r'logs="([^"<]+)"', body):
        resolve_logs(value, [], [])


def test_skill_tables_list_every_category_with_its_preset_and_first_call():
    text = SKILL.read_text()
    for category, playbook in PLAYBOOKS.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{category}` |"))
        assert (f"`{playbook.logs}`" if playbook.logs else "| none |") in row
        assert f"| `{category}` | `{diagnostic_text(playbook)}` |" in text
    for value in re.findall(r'logs="([^"<]+)"', text):
        resolve_logs(value, [], [])


# --------------------------------------------------------------------------------------------
# The step table


def _tools_in(text: str) -> set[str]:
    return set(re.findall(r"`(\w+)", text)) & {t.value for t in ToolName}


def _expected_tools(number: int) -> set[str]:
    return {t.value for t in STEPS[number - 1].tools}


def test_instructions_list_the_steps_from_the_table():
    lines = [line for line in INSTRUCTIONS.splitlines() if re.match(r"^\s?\d+ ", line)]
    assert [int(line.split()[0]) for line in lines] == [spec.number for spec in STEPS]
    for line, spec in zip(lines, STEPS, strict=True):
        assert spec.title in line
        assert set(re.findall(r"\w+", line.split("->")[0])) - {str(spec.number)} == \
            ({t.value for t in spec.tools} or {"your", "work"})


def test_skill_steps_agree_with_the_table():
    text = SKILL.read_text()
    headings = re.findall(r"^### (\d+)\. (.*)$", text, flags=re.M)
    assert [int(n) for n, _ in headings] == [spec.number for spec in STEPS]
    for number, title in headings:
        assert _tools_in(title) == _expected_tools(int(number)), title
    names = re.search(r"Step names:\s*`([^`]+)`", text)
    assert names is not None
    listed = [n.strip() for n in names.group(1).split(",")]
    assert listed == [spec.step.value for spec in STEPS] == [s.value for s in Step]


def test_readme_method_table_agrees_with_the_table():
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## The method", 1)[1].split("\n## ", 1)[0]
    covered = []
    for row in re.findall(r"^\| (\d+(?:[–-]\d+)?) \| (.*) \| (.*) \|$", section, flags=re.M):
        numbers = [int(n) for n in re.split(r"[–-]", row[0])]
        numbers = list(range(numbers[0], numbers[-1] + 1))
        covered += numbers
        assert _tools_in(row[2]) == set().union(*(_expected_tools(n) for n in numbers)), row
    assert covered == [spec.number for spec in STEPS]
