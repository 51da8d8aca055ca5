"""The skill and prompt texts: packaged in the wheel under _data/, read from the repo in a checkout."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from pt2_bug_basher.domain.errors import NotFound

_PACKAGED = Path(__file__).parent / "_data"
_CHECKOUT = Path(__file__).resolve().parents[2]


def data_dir(name: str) -> Path:
    """`skill` or `prompts`: the packaged copy if installed from a wheel, else the checkout's."""
    for base in (_PACKAGED, _CHECKOUT):
        candidate = base / name
        if candidate.is_dir():
            return candidate
    raise NotFound(f"the {name}/ directory is missing from this installation; reinstall pt2-bug-basher.")


def skill_dir() -> Path:
    return data_dir("skill")


@functools.cache
def skill_text() -> str:
    return (skill_dir() / "SKILL.md").read_text(encoding="utf-8")


def skill_body() -> str:
    """SKILL.md without its YAML frontmatter."""
    text = skill_text()
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            return text[end + 4 :].lstrip("\n")
    return text


def prompt_file(relative: str) -> str:
    base = data_dir("prompts")
    path = (base / relative).resolve()
    if not path.is_relative_to(base.resolve()) or not path.is_file():
        raise NotFound(f"no prompt template {relative!r}")
    return path.read_text(encoding="utf-8")


def parse_frontmatter(text: str) -> tuple[dict[str, object], str]:
    """Split a Markdown file into its YAML frontmatter and body."""
    if not text.startswith("---"):
        return {}, text
    end = text.find("\n---", 3)
    if end == -1:
        return {}, text
    import yaml

    meta = yaml.safe_load(text[3:end]) or {}
    return (meta if isinstance(meta, dict) else {}), text[end + 4 :].lstrip("\n")


@functools.cache
def category_playbook(category: str) -> tuple[dict[str, object], str]:
    return parse_frontmatter(prompt_file(f"categories/{category}.md"))


@dataclass(frozen=True)
class Celebration:
    text: str
    fits: dict[str, frozenset[str]] = field(default_factory=dict)
    """What a case must show for the line to fit: per fact (layer, device, category, ...), the values
    any of which will do; empty: the line fits every case."""

    def fits_case(self, facts: dict[str, set[str]]) -> bool:
        return all(values & facts.get(key, set()) for key, values in self.fits.items())


def celebrations() -> list[Celebration]:
    """The entries of celebrations.txt; an entry may open with `@fits key=value[,value] ...`."""
    out = []
    for chunk in prompt_file("celebrations.txt").split("\n%\n"):
        lines = chunk.strip("\n").splitlines()
        fits: dict[str, frozenset[str]] = {}
        if lines and lines[0].startswith("@fits "):
            for term in lines.pop(0).split()[1:]:
                key, _, values = term.partition("=")
                fits[key] = frozenset(v for v in values.split(",") if v)
        text = "\n".join(lines).strip("\n")
        if text.strip():
            out.append(Celebration(text, fits))
    return out
