"""Unit tests of the repository: static checks of a test file, pytest runs, JUnit XML, nearby tests.

Test files are checked by parsing them with `ast`; pytest results are read from its JUnit XML
report (xunit1, so every test case carries its file), never from its console output.
Tracebacks inside the report are Python's native format (`--tb=native`) so the failure parser
reads them like any other traceback.
"""

from __future__ import annotations

import ast
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pt2_bug_basher.case.store import CaseRecord, Store, new_id
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import ReproduceEvidence, TestEvidence
from pt2_bug_basher.execution.runs import ProgressFn, RunResult, execute

COMMON_UTILS = "torch.testing._internal.common_utils"
TESTCASE = f"{COMMON_UTILS}.TestCase"
# Catch-all files a new test must not go into, with the reason.
CATCH_ALL_FILES = {
    "test_misc.py": "a catch-all file that is already enormous; reviewers ask for the topical file instead",
}
_AD_HOC_NAME = re.compile(r"^test_(?:bug|issue|gh|tmp|temp|scratch|debug|my|new|foo|\d+)(?:[_\d].*)?\.py$")
DEFAULT_TEST_FILES = ("test/dynamo/test_repros.py", "test/inductor/test_torchinductor.py", "test/export/test_export.py")
MAX_TEXT = 20000
MESSAGE_CHARS = 500
XDIST_MIN_TESTS = 6
# Exceptions that say the test itself is broken (typo, missing import) rather than hitting the bug.
TEST_BUG_EXCEPTIONS = {"NameError", "ImportError", "ModuleNotFoundError", "SyntaxError", "IndentationError",
                       "UnboundLocalError", "TabError"}
SOFT_CATEGORIES = ("graph_break", "recompile", "accuracy")


# -- static checks ------------------------------------------------------------------------------


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
    pytest sees generated names, so the test is selected with -k."""
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


def suggest_test_files(repo: Path, category: str | None) -> list[str]:
    """Topical test files for a failure category, existing ones first."""
    candidates: list[str] = []
    if category:
        from pt2_bug_basher.playbooks import guide

        candidates.extend(guide(category).test_files)
    candidates.extend(DEFAULT_TEST_FILES)
    ordered = list(dict.fromkeys(candidates))
    existing = [c for c in ordered if (repo / c).is_file()]
    return existing + [c for c in ordered if c not in existing]


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


# -- JUnit XML ----------------------------------------------------------------------------------


@dataclass
class TestOutcome:
    node_id: str
    file: str
    name: str
    classname: str
    outcome: str  # passed, failed, error, skipped
    message: str = ""
    text: str = ""
    time_s: float = 0.0
    line: int | None = None


@dataclass
class JUnitReport:
    tests: list[TestOutcome] = field(default_factory=list)
    collection_errors: list[TestOutcome] = field(default_factory=list)
    parse_error: str | None = None

    def by_outcome(self, outcome: str) -> list[TestOutcome]:
        return [t for t in self.tests if t.outcome == outcome]

    def find(self, node_id: str) -> TestOutcome | None:
        return next((t for t in self.tests if t.node_id == node_id), None)


def _node_id(file: str, classname: str, name: str) -> str:
    module = re.sub(r"\.py$", "", file).replace("/", ".")
    if classname == module or not classname:
        inner = ""
    elif classname.startswith(module + "."):
        inner = classname[len(module) + 1 :]
    else:
        inner = classname.rsplit(".", 1)[-1]
    parts = [file, *(inner.split(".") if inner else []), name]
    return "::".join(parts)


def parse_junit(source: Path | str) -> JUnitReport:
    """Parse pytest's JUnit XML (a path or the XML text) into outcomes; collection errors apart."""
    report = JUnitReport()
    try:
        if isinstance(source, Path):
            root = ET.parse(source).getroot()
        else:
            root = ET.fromstring(source)
    except (ET.ParseError, OSError) as exc:
        report.parse_error = f"the JUnit report could not be read: {exc}"
        return report
    for case in root.iter("testcase"):
        classname = case.get("classname", "") or ""
        name = case.get("name", "") or ""
        file = case.get("file") or ""
        if not file:
            file = (classname.replace(".", "/") + ".py") if classname else name
        line = case.get("line")
        outcome, message, text = "passed", "", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = child.get("message", "") or ""
                text = child.text or ""
                break
        try:
            time_s = float(case.get("time", "0") or 0)
        except ValueError:
            time_s = 0.0
        if outcome == "error" and (message == "collection failure" or not classname):
            report.collection_errors.append(TestOutcome(
                node_id=file, file=file, name=name, classname=classname, outcome="collection_error",
                message=_collection_message(text) or message, text=text, time_s=time_s,
            ))
            continue
        report.tests.append(TestOutcome(
            node_id=_node_id(file, classname, name), file=file, name=name, classname=classname, outcome=outcome,
            message=message, text=text, time_s=time_s, line=int(line) + 1 if line and line.isdigit() else None,
        ))
    return report


def _collection_message(text: str) -> str:
    """The `E   ...` line(s) of a collection error, else its last line."""
    errors = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    if errors:
        return " ".join(errors)[:MESSAGE_CHARS]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip()[:MESSAGE_CHARS] if lines else ""


_HARNESS = re.compile(r"[/\\](?:_pytest|pluggy|unittest|xdist|execnet)[/\\]")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')


def clean_traceback(text: str) -> str:
    """Drop pytest/pluggy/unittest frames from a native traceback, so it reads like the repro's."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        frame = _FRAME.match(line)
        if frame:
            skipping = bool(_HARNESS.search(frame.group("file")))
            if not skipping:
                out.append(line)
            continue
        if skipping and line.startswith("    "):
            continue
        skipping = False
        out.append(line)
    return "\n".join(out)


def relevant_frame(text: str, test_file: str | None = None) -> str | None:
    """The innermost frame of the repository's code (not the harness), else the test's own frame."""
    frames = [m for m in (_FRAME.match(ln) for ln in text.splitlines()) if m]
    frames = [f for f in frames if not _HARNESS.search(f.group("file"))]
    if not frames:
        return None
    torch_frames = [f for f in frames if re.search(r"[/\\]torch[/\\]", f.group("file"))
                    and not re.search(r"[/\\]torch[/\\]testing[/\\]", f.group("file"))]
    test_frames = [f for f in frames if test_file and f.group("file").endswith(test_file)]
    chosen = (torch_frames or test_frames or frames)[-1]
    return f"{chosen.group('file')}:{chosen.group('line')} in {chosen.group('func')}"


# -- failure analysis ---------------------------------------------------------------------------


class FailureInfo(BaseModel):
    node_id: str
    outcome: str = Field(description="failed (an assertion or exception in the test) or error (setup/teardown)")
    message: str
    exception_type: str | None = None
    category: str | None = None
    signature: str | None = None
    frame: str | None = Field(None, description="the first relevant frame: innermost repository frame")


def analyse(outcome: TestOutcome) -> tuple[FailureInfo, Any]:
    """Classify one failed/errored test case from its JUnit text. Returns (info, classification)."""
    from pt2_bug_basher.analysis.classify import classify

    text = clean_traceback(outcome.text)[-200_000:]
    if not text.strip():
        text = outcome.message
    classification = classify(text)
    failure = classification.failure
    if failure is None:
        from pt2_bug_basher.analysis.failure import parse_failure

        failure = parse_failure(text)
    message = outcome.message or (failure.message if failure else "") or ""
    info = FailureInfo(
        node_id=outcome.node_id, outcome=outcome.outcome, message=message[:MESSAGE_CHARS],
        exception_type=failure.exception_type if failure else None, category=classification.category,
        signature=failure.signature if failure else None, frame=relevant_frame(text, outcome.file),
    )
    return info, classification


def short_type(name: str | None) -> str | None:
    return name.rsplit(".", 1)[-1] if name else None


class Comparison(BaseModel):
    matches: bool
    reason: str


def compare_with_reproduction(info: FailureInfo, classification: Any, repro: ReproduceEvidence | None,
                              test_file: str) -> Comparison:
    """Does the test fail the same way as the case's reproduction (category, then signature or type)?"""
    repro = repro or ReproduceEvidence()
    r_cat, r_sig = repro.category, repro.signature
    r_type = short_type(repro.exception_type)
    t_type = short_type(info.exception_type)
    seen = (f"the test failed with {info.exception_type or 'no exception'} ({info.category}): "
            f"{info.message[:200]!r}")
    wanted = f"the reproduction failed with {repro.exception_type or 'no exception'} ({r_cat})"
    if t_type in TEST_BUG_EXCEPTIONS and t_type != r_type:
        where = f" at {info.frame}" if info.frame else ""
        return Comparison(matches=False, reason=(
            f"{seen}{where}: that is a mistake in the test itself (a typo, a missing import), not the bug; "
            f"{wanted}. Fix the test"))
    secondary = list(getattr(classification, "secondary", []) or [])
    same_category = r_cat is None or info.category == r_cat or r_cat in secondary
    if r_sig and info.signature and r_sig == info.signature and same_category:
        return Comparison(matches=True, reason=f"same category ({r_cat}) and the same failure signature")
    if same_category and r_type and t_type == r_type:
        return Comparison(matches=True, reason=f"same category ({info.category}) and exception type {t_type}")
    if same_category and not r_type and t_type:
        return Comparison(matches=True, reason=f"same category ({info.category}); the reproduction had no exception")
    if r_cat in SOFT_CATEGORIES and t_type == "AssertionError" and info.frame and test_file in info.frame:
        return Comparison(matches=True, reason=(
            f"the reproduction is a {r_cat} problem and the test asserts on it (AssertionError in the test)"))
    if same_category and r_cat not in (None, "unknown") and info.category == r_cat:
        return Comparison(matches=False, reason=(
            f"{seen}; {wanted}: same category but a different exception — the test may hit another failure"))
    return Comparison(matches=False, reason=f"{seen}; {wanted}")


# -- running pytest -----------------------------------------------------------------------------

_XDIST_CACHE: dict[str, bool] = {}


async def has_xdist(store: Store, python: str) -> bool:
    if python not in _XDIST_CACHE:
        from pt2_bug_basher.execution.runner import run_captured

        captured = await run_captured(
            [python, "-c", "import xdist"], cwd=store.state_dir, env=dict(os.environ), timeout_s=60,
            scratch_dir=store.state_dir / "scratch",
        )
        _XDIST_CACHE[python] = captured.outcome.exit_code == 0
    return _XDIST_CACHE[python]


@dataclass
class PytestRun:
    run: RunResult
    report: JUnitReport
    argv: list[str]
    usage_error: str | None = None
    workers: int = 0

    @property
    def run_id(self) -> str:
        return self.run.run_id


def check_selector(value: str, what: str) -> str:
    if not value or not value.strip():
        raise InvalidInput(f"{what} is empty.")
    if value.startswith("-"):
        raise InvalidInput(f"{what} {value!r} looks like a command-line option; pass a test node id or expression.")
    if "\x00" in value or len(value) > 2000 or "\n" in value:
        raise InvalidInput(f"{what} must be one line under 2000 characters without NUL bytes.")
    return value


async def run_pytest(
    store: Store,
    case: CaseRecord,
    selectors: list[str],
    *,
    cwd: Path,
    rootdir: Path,
    tool: str,
    keyword: str | None = None,
    env_add: dict[str, str] | None = None,
    timeout_s: float,
    progress: ProgressFn | None = None,
    workers: int = 0,
    label: str = "pytest",
) -> PytestRun:
    """Run pytest with the case's interpreter and parse its JUnit report."""
    junit_dir = store.case_dir(case.case_id) / "junit"
    junit_dir.mkdir(parents=True, exist_ok=True)
    junit = junit_dir / f"{new_id('junit')}.xml"
    base = [case.python, "-m", "pytest", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
            f"--junitxml={junit}", "--tb=native", "-q", "-rN", "--continue-on-collection-errors",
            f"--rootdir={rootdir}"]
    tail = (["-k", keyword] if keyword else []) + ["--", *(absolute_selector(s, rootdir) for s in selectors)]
    argv = base + (["-n", str(workers)] if workers > 1 else []) + tail
    run = await execute(store, case, argv, tool=tool, cwd=cwd, env_add=env_add, timeout_s=timeout_s,
                        progress=progress, label=label)
    stderr = run.stderr_text(64 * 1024)
    if workers > 1 and run.outcome.exit_code == 4 and "-n" in stderr and "unrecognized arguments" in stderr:
        # The project's pytest configuration disables xdist: run serially.
        return await run_pytest(store, case, selectors, cwd=cwd, rootdir=rootdir, tool=tool, keyword=keyword,
                                env_add=env_add, timeout_s=timeout_s, progress=progress, workers=0, label=label)
    report = parse_junit(junit) if junit.exists() else JUnitReport(parse_error="pytest wrote no JUnit report")
    usage = None
    if run.outcome.timed_out:
        usage = f"pytest was killed after the timeout ({timeout_s:.0f}s)"
    elif run.outcome.signal_name:
        usage = f"pytest was killed by {run.outcome.signal_name}"
    elif run.outcome.exit_code in (3, 4) or (not report.tests and not report.collection_errors):
        lines = [ln.strip() for ln in (stderr + "\n" + run.stdout_text(16 * 1024)).splitlines()
                 if ln.strip().startswith(("ERROR", "INTERNALERROR", "E ", "no tests ran", "usage:", "pytest:"))]
        usage = ("; ".join(dict.fromkeys(lines))[:1000] or
                 f"pytest ran no test ({run.outcome.describe_exit()})")
    return PytestRun(run=run, report=report, argv=argv, usage_error=usage, workers=workers)


def absolute_selector(selector: str, rootdir: Path) -> str:
    """A rootdir-relative node id as an absolute one, so any working directory selects the same test."""
    file, sep, rest = selector.partition("::")
    path = Path(file)
    return str(path if path.is_absolute() else rootdir / path) + sep + rest


def registered_test(flow: Any) -> TestEvidence:
    """The case's registered test (the latest passing `test` evidence)."""
    from pt2_bug_basher.domain.errors import GateClosed
    from pt2_bug_basher.domain.names import Step

    record = flow.latest_ok(Step.test)
    if record is None:
        case_id = flow.case.case_id
        raise GateClosed(
            "the case has no registered test (the test step was waived, so there is nothing to run). "
            f'Register one: register_test(case_id="{case_id}", test_file="test/<area>/test_<topic>.py", '
            'test_name="<TestClass.test_name>")'
        )
    return record.payload(TestEvidence)


def repo_cwd(case: CaseRecord, repo: Path, test_file: str | None) -> tuple[Path, list[str]]:
    """Where to run pytest on the primary checkout. From the repository root, unless that root holds
    a torch/ package that is not the torch the case imports (an installed build beside a checkout):
    `python -m pytest` puts its working directory first on the path, which would shadow it."""
    torch_from_repo = bool((case.env.get("torch") or {}).get("imported_from_repo"))
    if torch_from_repo or not (repo / "torch" / "__init__.py").is_file():
        return repo, []
    cwd = (repo / test_file).parent if test_file else repo / "test"
    return (cwd if cwd.is_dir() else repo), [
        "torch is not imported from the repository, so the tests run against the installed torch; "
        "edits to the repository's torch sources are not exercised"]


def pythonpath_with(first: Path, environ: dict[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    existing = environ.get("PYTHONPATH", "")
    return str(first) + (os.pathsep + existing if existing else "")


# -- changed functions and nearby tests --------------------------------------------------------

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


class NearbyTest(BaseModel):
    node_id: str
    why: str


def nearby_tests(repo: Path, test_file: str, class_name: str | None, method: str, keywords: list[str],
                 extra_files: list[str], limit: int = 30) -> list[NearbyTest]:
    """Existing tests near the registered one: sharing keywords with the changed functions (in the
    registered file and the category's topical files), then the closest tests of the same class."""
    chosen: dict[str, NearbyTest] = {}
    registered = f"{test_file}::{class_name}::{method}"
    files = list(dict.fromkeys([test_file, *extra_files]))
    for rel in files:
        path = repo / rel
        if not path.is_file():
            continue
        for cls, methods in test_methods(path).items():
            for name in methods:
                node = f"{rel}::{cls}::{name}"
                if node == registered:
                    continue
                lowered = name.lower()
                hit = next((k for k in keywords if k.lower() in lowered), None)
                if hit:
                    chosen.setdefault(node, NearbyTest(node_id=node, why=f"name shares '{hit}' with a changed function"))
    keyword_hits = list(chosen.values())[: limit * 2 // 3]
    chosen = {n.node_id: n for n in keyword_hits}
    if class_name:
        methods = test_methods(repo / test_file).get(class_name, {})
        anchor = methods.get(method, 0)
        for name, _line in sorted(methods.items(), key=lambda kv: abs(kv[1] - anchor)):
            node = f"{test_file}::{class_name}::{name}"
            if node == registered or node in chosen:
                continue
            if len(chosen) >= limit:
                break
            chosen[node] = NearbyTest(node_id=node, why=f"same class {class_name}, nearby in the file")
    return list(chosen.values())[:limit]
