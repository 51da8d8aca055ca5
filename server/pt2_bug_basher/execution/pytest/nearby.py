"""Existing tests near the registered one: the functions a diff changes, their keywords, and the
tests that share them or sit beside the registered test, as node ids pytest runs as given.

Candidates come from the tests pytest collected (the report plugin's items), so a parametrized or
generated test is suggested by its real node ids, never by the name written in the file.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from pt2_bug_basher.execution.pytest.results import CollectedItem
from pt2_bug_basher.execution.pytest.static_checks import test_methods

# Generated variants suggested per test written in the file.
VARIANTS_SHOWN = 3

_STOPWORDS = {"call", "get", "set", "is", "has", "to", "from", "the", "and", "or", "impl", "helper", "inner",
              "wrapper", "fn", "func", "self", "init", "new", "handle", "visit", "test", "run", "do", "make",
              "maybe", "check", "default", "with", "for", "of", "in", "on", "var", "variable", "method",
              "function", "args", "kwargs", "value", "values", "node", "nodes", "tx", "op", "ops", "data", "main"}


@dataclass
class ChangedFunction:
    file: str
    name: str
    line: int


def changed_functions(repo_root: Path, added_lines: dict[str, list[int]]) -> list[ChangedFunction]:
    """The innermost functions (by AST) that contain changed lines of changed Python source files."""
    found: dict[tuple[str, str], ChangedFunction] = {}
    for rel, lines in added_lines.items():
        if not rel.endswith(".py") or not lines:
            continue
        try:
            tree = ast.parse((repo_root / rel).read_text(encoding="utf-8", errors="replace"))
        except (OSError, SyntaxError, ValueError):
            continue
        spans = [(n.lineno, n.end_lineno or n.lineno, n.name) for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for line in lines:
            inner = [s for s in spans if s[0] <= line <= s[1]]
            if inner:
                start, _, name = max(inner, key=lambda s: s[0])
                found.setdefault((rel, name), ChangedFunction(rel, name, start))
    return list(found.values())


def keywords_for(names: list[str]) -> list[str]:
    """-k keywords for function names: the name itself (without leading underscores), then its
    distinctive words."""
    words: list[str] = []
    for name in names:
        bare = name.strip("_")
        if bare.startswith("test"):
            continue
        if bare and bare not in _STOPWORDS and not bare.startswith("__"):
            words.append(bare)
        for token in re.split(r"_+", bare):
            token = token.lower()
            if len(token) >= 3 and token not in _STOPWORDS and not token.isdigit():
                words.append(token)
    return list(dict.fromkeys(words))


def _keyword_in(name: str, keywords: list[str]) -> str | None:
    lowered = name.lower()
    return next((k for k in keywords if k.lower() in lowered), None)


def files_to_collect(repo: Path, test_file: str, keywords: list[str], extra_files: list[str]) -> list[str]:
    """The registered test's file, and the other files whose test names (read statically) share a
    keyword: only these are worth collecting."""
    files = [test_file]
    for rel in extra_files:
        if rel != test_file and (repo / rel).is_file() and any(
                _keyword_in(name, keywords) for methods in test_methods(repo / rel).values() for name in methods):
            files.append(rel)
    return files


class NearbyTest(BaseModel):
    node_id: str
    why: str


def is_registered(item: CollectedItem, test_file: str, class_name: str | None, method: str) -> bool:
    """The collected item is the registered test, or one of its generated variants."""
    return item.file == test_file and item.is_variant_of(f"{class_name}.{method}" if class_name else method)


def nearby_tests(collected: list[CollectedItem], test_file: str, class_name: str | None, method: str,
                 keywords: list[str], extra_files: list[str], limit: int = 30) -> list[NearbyTest]:
    """Existing tests near the registered one: sharing keywords with the changed functions (in the
    registered file and the category's topical files), then the closest tests of the same class.
    Each test written in a file stands for its collected node ids (up to VARIANTS_SHOWN of them)."""
    files = list(dict.fromkeys([test_file, *extra_files]))
    groups: dict[tuple[str, str], list[CollectedItem]] = {}
    for item in collected:
        if item.file in files and not is_registered(item, test_file, class_name, method):
            groups.setdefault((item.file, item.template), []).append(item)
    in_order = sorted(groups.items(), key=lambda kv: (files.index(kv[0][0]), kv[1][0].line or 0))

    def suggest(items: list[CollectedItem], why: str) -> list[NearbyTest]:
        if len(items) > 1:
            why += f" ({len(items)} generated variants" + (f", {VARIANTS_SHOWN} listed)" if len(items) > VARIANTS_SHOWN
                                                           else ")")
        return [NearbyTest(node_id=item.node_id, why=why) for item in items[:VARIANTS_SHOWN]]

    chosen: dict[str, NearbyTest] = {}
    for (_file, _template), items in in_order:
        hit = _keyword_in(items[0].function, keywords)
        if hit:
            for test in suggest(items, f"name shares '{hit}' with a changed function"):
                chosen.setdefault(test.node_id, test)
    chosen = {n.node_id: n for n in list(chosen.values())[: limit * 2 // 3]}
    if class_name:
        anchor = next((item.line or 0 for item in collected
                       if is_registered(item, test_file, class_name, method)), 0)
        same_class = [(items, abs((items[0].line or 0) - anchor)) for (file, _), items in in_order
                      if file == test_file and items[0].template_class == class_name]
        for items, _distance in sorted(same_class, key=lambda pair: pair[1]):
            if len(chosen) >= limit:
                break
            for test in suggest(items, f"same class {class_name}, nearby in the file"):
                chosen.setdefault(test.node_id, test)
    return list(chosen.values())[:limit]
