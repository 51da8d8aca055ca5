"""Static checks of a test file, by parsing it with `ast`: a topical file, a TestCase class, the
`run_tests()` guard, the named test; and the test files that suit a failure category.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.playbooks import FileChoice, focus, present_in

COMMON_UTILS = "torch.testing._internal.common_utils"
TESTCASE = f"{COMMON_UTILS}.TestCase"
# Catch-all files a new test must not go into, with the reason.
CATCH_ALL_FILES = {
    "test_misc.py": "a catch-all file that is already enormous; reviewers ask for the topical file instead",
}
_AD_HOC_NAME = re.compile(r"^test_(?:bug|issue|gh|tmp|temp|scratch|debug|my|new|foo|\d+)(?:[_\d].*)?\.py$")
DEFAULT_TEST_FILES = ("test/dynamo/test_repros.py", "test/inductor/test_torchinductor.py", "test/export/test_export.py")


@dataclass
class ClassInfo:
    name: str
    line: int
    bases: list[str]
    methods: dict[str, int]
    testcase: bool = False
    why: str = ""


@dataclass
class StaticCheck:
    """What parsing the test file found. `problems` empty means the file is acceptable."""

    test_file: str
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    class_name: str | None = None
    method: str | None = None
    line: int | None = None
    instantiated: bool = False
    """The class is a template (instantiate_device_type_tests / instantiate_parametrized_tests):
    pytest sees generated names, so the test is selected by its template (the report plugin's
    --pt2bb-only), not by node id."""
    classes: dict[str, ClassInfo] = field(default_factory=dict)

    @property
    def qualified(self) -> str:
        return f"{self.class_name}.{self.method}" if self.class_name else str(self.method)

    @property
    def node_id(self) -> str:
        return f"{self.test_file}::{self.class_name}::{self.method}"


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript):  # Generic[T] style bases
        return _dotted(node.value)
    return None


class _Imports:
    """Names bound by a module's imports: local name -> fully qualified dotted name."""

    def __init__(self, tree: ast.Module, module_name: str | None = None) -> None:
        self.names: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.names[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.names.setdefault(top, top)
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level and module_name:
                    package = module_name.split(".")[: -node.level]
                    module = ".".join([*package, module] if module else package)
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    self.names[alias.asname or alias.name] = f"{module}.{alias.name}" if module else alias.name

    def qualify(self, dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        if head in self.names:
            full = self.names[head]
            return f"{full}.{rest}" if rest else full
        return dotted


def _module_file(module: str, search: list[Path]) -> Path | None:
    parts = module.split(".")
    for root in search:
        for candidate in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
            if candidate.is_file():
                return candidate
    return None


class _Resolver:
    """Decides statically whether a class derives from common_utils.TestCase, following imports
    into the repository's own modules (e.g. torch._dynamo.test_case.TestCase)."""

    def __init__(self, search: list[Path]) -> None:
        self.search = search
        self._cache: dict[str, tuple[bool, str]] = {TESTCASE: (True, TESTCASE)}
        self._parsed: dict[Path, tuple[ast.Module, _Imports, dict[str, ast.ClassDef]] | None] = {}

    def _parse(self, path: Path, module: str | None):
        if path not in self._parsed:
            try:
                tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
                classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
                self._parsed[path] = (tree, _Imports(tree, module), classes)
            except (OSError, SyntaxError, ValueError):
                self._parsed[path] = None
        return self._parsed[path]

    def qualified(self, qualified: str, depth: int = 0) -> tuple[bool, str]:
        """(is a TestCase, chain) for a fully qualified class name."""
        if qualified in self._cache:
            return self._cache[qualified]
        self._cache[qualified] = (False, qualified)  # cycles resolve to False
        result = (False, qualified)
        module, _, name = qualified.rpartition(".")
        if module and depth < 6:
            path = _module_file(module, self.search)
            parsed = self._parse(path, module) if path else None
            if parsed is not None:
                _, imports, classes = parsed
                if name in classes:
                    result = self.classdef(classes[name], imports, classes, depth + 1, prefix=qualified)
                elif name in imports.names:  # re-exported: `from x import TestCase` in that module
                    ok, chain = self.qualified(imports.names[name], depth + 1)
                    result = (ok, f"{qualified} -> {chain}")
        self._cache[qualified] = result
        return result

    def classdef(self, node: ast.ClassDef, imports: _Imports, classes: dict[str, ast.ClassDef], depth: int,
                 prefix: str) -> tuple[bool, str]:
        for base in node.bases:
            dotted = _dotted(base)
            if dotted is None:
                continue
            if dotted in classes and classes[dotted] is not node:
                ok, chain = self.classdef(classes[dotted], imports, classes, depth + 1, prefix=dotted)
            else:
                ok, chain = self.qualified(imports.qualify(dotted), depth + 1)
            if ok:
                return True, f"{prefix} -> {chain}"
        return False, prefix


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    sides = [test.left, *test.comparators]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return bool(names and consts and isinstance(test.ops[0], ast.Eq))


def _calls_run_tests(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            name = _dotted(sub.func)
            if name and name.split(".")[-1] == "run_tests":
                return True
    return False


def _instantiated(tree: ast.Module, class_name: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = (_dotted(node.func) or "").split(".")[-1]
            if name.startswith("instantiate_") and node.args and _dotted(node.args[0]) == class_name:
                return True
    return False


def split_test_name(test_name: str) -> tuple[str | None, str]:
    """'Class.test', 'Class::test', 'file.py::Class::test' or 'test' -> (class or None, method)."""
    name = test_name.strip()
    if "::" in name:
        parts = [p for p in name.split("::") if p]
        if parts and parts[0].endswith(".py"):
            parts = parts[1:]
    else:
        parts = name.split(".")
    if not parts or len(parts) > 2 or not all(p.isidentifier() for p in parts):
        raise InvalidInput(
            f"test_name {test_name!r} is not a test name: pass 'TestClass.test_method' or 'test_method'."
        )
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def topical_problem(rel: str) -> str | None:
    """Why a repository-relative test file is not an acceptable home for a new test, if it is not."""
    path = Path(rel)
    name = path.name
    if name in CATCH_ALL_FILES:
        return f"{rel} is {CATCH_ALL_FILES[name]}"
    if not name.startswith("test_") or path.suffix != ".py":
        return f"{rel} is not a test file: PyTorch test files are named test_<topic>.py"
    if _AD_HOC_NAME.match(name):
        return f"{rel} is named after a bug, not a topic: add the test to the existing file for the area"
    if "test" not in path.parts[:-1]:
        return f"{rel} is not under the repository's test/ directory"
    return None


def suggest_test_files(repo: Path, category: str | None, layer: str | None = None) -> FileChoice:
    """Topical test files for a failure category (following localize's layer, when known) that exist in
    the repository; the upstream file when none does."""
    candidates = focus(category, layer).test_files if category or layer else list(DEFAULT_TEST_FILES)
    return present_in(repo, candidates or list(DEFAULT_TEST_FILES))


def test_file_hint(repo: Path, category: str | None, layer: str | None, limit: int = 5) -> str:
    """Where a new test for this failure belongs, in a sentence: files present in the checkout only."""
    subject = f"a test of this {category or 'compiler'} failure" + (f" (localize put it in {layer})" if layer else "")
    choice = suggest_test_files(repo, category, layer)
    if choice.present:
        return f"Better homes for {subject}: " + ", ".join(choice.present[:limit]) + "."
    return (f"None of the topical test files for {subject} exists in this checkout, so it looks partial: upstream "
            f"PyTorch keeps such tests in {choice.upstream}. In a full checkout add the test to that file; here, "
            f"create {choice.upstream} at that very path with the test (a TestCase class and the usual main "
            "guard that runs the file's tests), so the test lands in upstream's file when the change is ported.")


def new_test_file_note(repo: Path, test_file: str, category: str | None, layer: str | None) -> str:
    """A test file git does not track yet: fine when it is the area's topical file, else point at better homes."""
    candidates = focus(category, layer).test_files if category or layer else list(DEFAULT_TEST_FILES)
    if test_file in candidates:
        return (f"{test_file} is new in this checkout (git does not track it); it is where upstream PyTorch keeps "
                "tests of this area, so keep it: add it to your change (git add).")
    others = [f for f in suggest_test_files(repo, category, layer).present if f != test_file]
    if others:
        return f"{test_file} is a new file: prefer an existing topical file: " + ", ".join(others[:3]) + "."
    return (f"{test_file} is a new file, and no topical test file of this area exists in this checkout: keep it "
            "if it is the area's file upstream, and add it to your change (git add).")


def check_test_file(repo: Path, path: Path, test_name: str) -> StaticCheck:
    """Parse the test file and check: topical file, TestCase class, run_tests() guard, named test."""
    rel = path.relative_to(repo).as_posix()
    check = StaticCheck(test_file=rel)
    topical = topical_problem(rel)
    if topical:
        check.problems.append(topical)
    if not path.is_file():
        check.problems.append(f"{rel} does not exist")
        return check
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=rel)
    except SyntaxError as exc:
        check.problems.append(f"{rel} does not parse: {exc.msg} at line {exc.lineno}")
        return check
    module_name = rel[:-3].replace("/", ".")
    imports = _Imports(tree, module_name)
    resolver = _Resolver([repo, path.parent])
    top_classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for name, node in top_classes.items():
        methods = {f.name: f.lineno for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        ok, chain = resolver.classdef(node, imports, top_classes, 0, prefix=name)
        bases = [_dotted(b) or ast.unparse(b) for b in node.bases]
        check.classes[name] = ClassInfo(name, node.lineno, bases, methods, ok, chain)

    if not tree.body or not _is_main_guard(tree.body[-1]) or not _calls_run_tests(tree.body[-1]):
        check.problems.append(
            f"{rel} must end with `if __name__ == \"__main__\": run_tests()` (run_tests from "
            f"{COMMON_UTILS} or torch._dynamo.test_case), as every PyTorch test file does"
        )

    class_name, method = split_test_name(test_name)
    check.method = method
    if not method.startswith("test"):
        check.problems.append(f"{method!r} is not a test method: its name must start with 'test'")
    if class_name is None:
        owners = [c.name for c in check.classes.values() if method in c.methods]
        if not owners:
            module_level = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == method
                               for n in tree.body)
            if module_level:
                check.problems.append(
                    f"{method} is a module-level function: put it in a TestCase class of {rel}"
                )
            else:
                check.problems.append(f"no test named {method!r} in {rel}" + _listing(check))
            return check
        if len(owners) > 1:
            check.problems.append(
                f"{method!r} is defined in several classes of {rel} ({', '.join(owners)}): "
                f"pass test_name=\"<Class>.{method}\""
            )
            return check
        class_name = owners[0]
    info = check.classes.get(class_name)
    if info is None:
        check.problems.append(f"no class {class_name!r} in {rel}" + _listing(check))
        return check
    check.class_name = class_name
    if method not in info.methods and not _inherited(check, info, method):
        check.problems.append(f"class {class_name} in {rel} has no method {method!r}" + _listing(check))
        return check
    check.line = info.methods.get(method, info.line)
    if not info.testcase:
        check.problems.append(
            f"class {class_name} (bases: {', '.join(info.bases) or 'none'}) does not derive from {TESTCASE}: "
            "derive the test class from it (directly, via torch._dynamo.test_case.TestCase, or via another "
            "TestCase class of the file) so the test runs under PyTorch's harness"
        )
    check.instantiated = _instantiated(tree, class_name)
    return check


def _inherited(check: StaticCheck, info: ClassInfo, method: str) -> bool:
    seen = set()
    stack = list(info.bases)
    while stack:
        base = stack.pop()
        if base in seen or base not in check.classes:
            continue
        seen.add(base)
        if method in check.classes[base].methods:
            return True
        stack.extend(check.classes[base].bases)
    return False


def _listing(check: StaticCheck) -> str:
    tests = [f"{c.name}.{m}" for c in check.classes.values() if c.testcase for m in c.methods if m.startswith("test")]
    if not tests:
        return ""
    shown = ", ".join(tests[:15]) + (f", ... ({len(tests)} in all)" if len(tests) > 15 else "")
    return f" (tests in the file: {shown})"


def test_methods(path: Path) -> dict[str, dict[str, int]]:
    """class -> {test method: line} for the TestCase-looking classes of a file (best effort)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, dict[str, int]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            methods = {f.name: f.lineno for f in node.body
                       if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name.startswith("test")}
            if methods:
                found[node.name] = methods
    return found
