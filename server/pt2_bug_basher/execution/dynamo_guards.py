"""localize, when the failure is in Dynamo: one run with the guards and recompiles logs, summarised.

The run is recorded like the ladder's rungs (same interpreter, launcher, environment) with
``TORCH_LOGS=guards,recompiles``. Its guard trees say what Dynamo compiled and on what it would
reuse each compiled entry; a flagged guard shape (analysis/guards.py) names the places in the
case's own torch that build that guard, resolved to line numbers by parsing those files.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from pt2_bug_basher.analysis.guards import GUARD_LOGS, DynamoDecisions, GuardFlag, summarise_guards
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.domain.evidence import Suspect
from pt2_bug_basher.execution.runner import run_captured
from pt2_bug_basher.execution.runs import BASE_ENV, ProgressFn, execute
from pt2_bug_basher.execution.warm import WarmRequest

BUILDER = "torch/_dynamo/variables/builder.py"
GUARDS = "torch/_dynamo/guards.py"
PROBE_TIMEOUT_S = 60.0
# guard builders whose guard the tree dump prints under another name
_TREE_NAMES = {"SEQUENCE_LENGTH": "LENGTH_CHECK"}
_FIND_TORCH = ("import importlib.util; spec = importlib.util.find_spec('torch'); "
               "print(spec.origin if spec and spec.origin else '')")


_COMPILER_EXCEPTIONS = ("torch._dynamo", "torch._inductor", "Unsupported", "InternalTorchDynamoError",
                        "BackendCompilerFailed", "InductorError", "TorchRuntimeError")


def wants_guard_run(exception_type: str | None) -> bool:
    """A failure Dynamo did not raise itself (a wrong result, an error in user code): its guards may explain it."""
    return not any(name in (exception_type or "") for name in _COMPILER_EXCEPTIONS)


async def dynamo_decisions(
    store: Store, case: CaseRecord, argv: list[str], *, env: dict[str, str], cwd: Path, timeout_s: float,
    progress: ProgressFn,
) -> tuple[DynamoDecisions, list[Suspect]]:
    """Run `argv` (the eager rung's command) with the guard logs; the summary, and the suspects its flags name."""
    result = await execute(store, case, argv, tool="localize", cwd=cwd, env_add={**env, "TORCH_LOGS": GUARD_LOGS},
                           timeout_s=timeout_s, progress=progress, warm=WarmRequest(),
                           label=f"localize backend=eager TORCH_LOGS={GUARD_LOGS}")
    decisions = summarise_guards(result.stderr_text(), recompiles_logged=True, run_id=result.run_id)
    suspects: list[Suspect] = []
    if decisions.flags:
        suspects = suspects_for(decisions.flags, await torch_package_dir(store, case, cwd, env))
    await progress(f"localize: Dynamo compiled {decisions.compiled_entries} entries, "
                   f"{len(decisions.flags)} suspicious guard shapes")
    return decisions, suspects


async def torch_package_dir(store: Store, case: CaseRecord, cwd: Path, env: dict[str, str]) -> Path | None:
    """The torch package the case's interpreter imports from `cwd` (found without importing it)."""
    environ = {**os.environ, **BASE_ENV, **env}
    captured = await run_captured([case.python, "-c", _FIND_TORCH], cwd=cwd, env=environ,
                                  timeout_s=PROBE_TIMEOUT_S, scratch_dir=store.case_dir(case.case_id) / "scratch")
    origin = captured.stdout.strip().splitlines()[-1:] if captured.outcome.exit_code == 0 else []
    if origin and origin[0]:
        return Path(origin[0]).parent
    recorded = (case.env.get("torch") or {}).get("file")
    return Path(recorded).parent if recorded else None


def find_function(path: Path, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The definition of `Class.method` (or a module-level function) in a Python file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    *outer, name = qualname.split(".")
    scope: list[ast.stmt] = tree.body
    for part in outer:
        cls = next((n for n in scope if isinstance(n, ast.ClassDef) and n.name == part), None)
        if cls is None:
            return None
        scope = cls.body
    return next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name),
                None)


def _installs(path: Path, node: ast.AST, guard: str) -> list[int]:
    """Lines in the function's body that name GuardBuilder.<guard>."""
    lines: list[int] = []
    for sub in ast.walk(node):
        if (isinstance(sub, ast.Attribute) and sub.attr == guard and isinstance(sub.value, ast.Name)
                and sub.value.id == "GuardBuilder"):
            lines.append(sub.lineno)
    return sorted(set(lines))


def suspects_for(flags: list[GuardFlag], torch_dir: Path | None) -> list[Suspect]:
    """For each flagged guard shape: the builder method that wraps such a value, then the guard's builder."""
    suspects: list[Suspect] = []
    seen: set[tuple[str, str]] = set()
    for flag in flags:
        for file, function in ((BUILDER, flag.wrapped_by), (GUARDS, f"GuardBuilder.{flag.missing}")):
            if (file, function) in seen:
                continue
            seen.add((file, function))
            suspects.append(_suspect(flag, file, function, torch_dir))
    return suspects


def _suspect(flag: GuardFlag, file: str, function: str, torch_dir: Path | None) -> Suspect:
    path = torch_dir.parent / file if torch_dir is not None else None
    node = find_function(path, function) if path is not None else None
    where = f"in {', '.join(flag.compile_ids)}"
    if file == BUILDER:
        why = (f"{flag.source} ({flag.type}) {where}: {flag.kind.replace('_', ' ')}. Dynamo wraps a "
               f"{flag.type} input here and installs its {flag.missing} guard")
        if node is not None and path is not None:
            found = _installs(path, node, flag.missing)
            why += (f"; this function names GuardBuilder.{flag.missing} at line(s) "
                    f"{', '.join(map(str, found))}: check why that guard did not reach {flag.source}" if found else
                    f"; this function's body never names GuardBuilder.{flag.missing} in this torch")
    else:
        shown = _TREE_NAMES.get(flag.missing, flag.missing)
        why = f"builds the {flag.missing} guard ({shown} in the guard tree) that {flag.source} lacks {where}"
    if node is None:
        why += (f" (not found in {path})" if path is not None else " (the case's torch could not be located)")
    return Suspect(file=file, line=node.lineno if node is not None else None, function=function, why=why)
