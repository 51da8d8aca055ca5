"""Step 1: which interpreter, does `import torch` work there, and which torch is it."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.execution.runner import run_captured, run_short_sync

PROBE = Path(__file__).resolve().parents[1] / "_probes" / "env_probe.py"
PROBE_MARKER = "PT2BB-PROBE:"
DEFAULT_PROBE_TIMEOUT_S = 180.0
_PYTHON_NAME = re.compile(r"^python[0-9.]*(\.exe)?$")


class GpuInfo(BaseModel):
    index: int
    name: str
    capability: str
    memory_gib: float


class TorchBasics(BaseModel):
    version: str
    git_version: str | None = Field(None, description=(
        "the commit torch was built from (torch.version.git_version); a develop build keeps it from its last "
        "build, so it is not the checkout's current commit (git rev-parse HEAD in the checkout says that)"))
    file: str
    imported_from_repo: bool = Field(description="torch is imported from inside the repository being fixed")
    import_seconds: float | None = None
    cuda_available: bool = False
    cuda_version: str | None = None
    gpus: list[GpuInfo] = Field(default_factory=list)
    triton_version: str | None = None


class TorchInfo(TorchBasics):
    """What the probe found, kept with the case (the TORCH_LOGS names validate run_with_logs specs)."""

    log_components: list[str] = Field(default_factory=list, description="TORCH_LOGS component names")
    log_artifacts: list[str] = Field(default_factory=list, description="TORCH_LOGS artifact names")


class EnvFacts(BaseModel):
    ok: bool
    python: str = Field(description="the interpreter that will run every repro and test of the case")
    python_version: str | None = None
    rule: str = Field(description="which rule chose the interpreter")
    active_env: str | None = Field(None, description="the environment active in the server's process, if any")
    repo: str
    import_error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    ask_user: str | None = Field(None, description="a question the agent must put to the user before going on")


class EnvReport(EnvFacts):
    torch: TorchInfo | None = None


@dataclass(frozen=True)
class Interpreter:
    python: Path
    rule: str
    active_env: str | None
    ask_user: str | None = None


def _env_python(prefix: Path) -> Path:
    for candidate in (prefix / "bin" / "python", prefix / "bin" / "python3", prefix / "python.exe"):
        if candidate.exists():
            return candidate
    raise InvalidInput(f"the environment at {prefix} has no bin/python; is it a conda env or virtualenv?")


# a frame of torch installed in an environment: <prefix>/lib/python3.X/site-packages/torch/...
_INSTALLED_TORCH_FRAME = re.compile(r"^(?P<prefix>/.+?)/lib/python3\.\d+/(?:site|dist)-packages/torch/")


def interpreter_of_frames(files: list[str]) -> Path | None:
    """The interpreter of the environment whose installed torch the frames run in, when that environment and
    its torch exist on this machine (a traceback pasted from here names it; one from elsewhere may name a
    system path that exists here without torch in it)."""
    found = [(m["prefix"], m.group(0)) for f in files if (m := _INSTALLED_TORCH_FRAME.match(f.replace("\\", "/")))]
    for prefix, torch_dir in dict.fromkeys(found):  # each environment named, checked once
        if not (Path(torch_dir) / "__init__.py").is_file():
            continue
        try:
            return _env_python(Path(prefix))
        except InvalidInput:
            continue
    return None


def active_environment(environ: dict[str, str]) -> tuple[str, Path] | None:
    """(name, prefix) of the conda env or virtualenv active in environ."""
    if environ.get("CONDA_PREFIX"):
        prefix = Path(environ["CONDA_PREFIX"])
        return environ.get("CONDA_DEFAULT_ENV") or prefix.name, prefix
    if environ.get("VIRTUAL_ENV"):
        prefix = Path(environ["VIRTUAL_ENV"])
        return prefix.name, prefix
    return None


def _conda_envs(environ: dict[str, str]) -> dict[str, Path] | None:
    """Named conda envs from `conda info --envs --json`, or None when conda is absent."""
    conda = environ.get("CONDA_EXE") or shutil.which("conda", path=environ.get("PATH"))
    if not conda:
        return None
    out = run_short_sync([conda, "info", "--envs", "--json"], environ, timeout_s=60)
    try:
        envs = json.loads(out).get("envs", []) if out is not None else None
    except ValueError:
        envs = None
    if envs is None:
        return None
    named = {Path(env).name: Path(env) for env in envs}
    if envs:
        named.setdefault("base", Path(envs[0]))
    return named


def resolve_interpreter(
    conda_env: str | None, python: str | None, environ: dict[str, str] | None = None
) -> Interpreter:
    environ = dict(os.environ if environ is None else environ)
    active = active_environment(environ)
    active_name = active[0] if active else None
    if python:
        try:
            path = Path(python).expanduser()
            exists = path.exists()
        except (OSError, RuntimeError) as exc:  # "~user" of an unknown user, a name too long, ...
            raise InvalidInput(f"python {python!r} cannot be used: {exc}") from exc
        if not exists:
            raise InvalidInput(f"python {python!r} does not exist. Pass the full path of an interpreter.")
        if not os.access(path, os.X_OK) or path.is_dir():
            raise InvalidInput(f"python {python!r} is not an executable file.")
        if not _PYTHON_NAME.match(path.name):
            raise InvalidInput(
                f"python {python!r} does not look like a Python interpreter (its name should be python, "
                "python3 or python3.X). Pass the interpreter of the environment, e.g. ENV/bin/python."
            )
        return Interpreter(path.absolute(), "explicit python argument", active_name)
    if conda_env:
        if active is not None and active[0] == conda_env:
            rule = ("active conda env (CONDA_DEFAULT_ENV/CONDA_PREFIX)" if environ.get("CONDA_PREFIX")
                    else "active virtualenv (VIRTUAL_ENV)")
            return Interpreter(_env_python(active[1]), f"named env {conda_env!r} is the {rule}", active_name)
        envs = _conda_envs(environ)
        if envs and conda_env in envs:
            return Interpreter(
                _env_python(envs[conda_env]),
                f"named conda env {conda_env!r} found by `conda info --envs`",
                active_name,
                ask_user=(
                    f"The conda env {conda_env!r} was named but the active one is {active_name or 'none'}. "
                    "Confirm with the user that this is the environment where the failure happens."
                ),
            )
        known = sorted(envs) if envs else ([active_name] if active_name else [])
        raise InvalidInput(
            f"no environment named {conda_env!r}: conda is {'available' if envs is not None else 'not installed'}"
            f" and the active env is {active_name or 'none'}. Known envs: {', '.join(known) or 'none'}. "
            'Ask the user which environment to use, then call check_env(conda_env="<env name>") or '
            'check_env(python="<interpreter path>").'
        )
    if active is not None:
        kind = "conda env" if environ.get("CONDA_PREFIX") else "virtualenv"
        return Interpreter(_env_python(active[1]), f"active {kind} {active[0]!r}", active_name)
    return Interpreter(
        Path(sys.executable),
        "no env active or named: the server's own interpreter",
        None,
        ask_user=(
            f"No conda env or virtualenv is active and none was named, so the server's interpreter "
            f"{sys.executable} was used. Ask the user which environment reproduces the failure; if it is "
            'another, call check_env(conda_env="<env name>") or check_env(python="<interpreter path>") to start '
            "the case there."
        ),
    )


def _imported_from_checkout(torch_file: Path, repo: Path) -> bool:
    """torch comes from the repository's own sources, not from a virtualenv that sits inside it."""
    resolved, root = torch_file.resolve(), repo.resolve()
    if not resolved.is_relative_to(root):
        return False
    return not {"site-packages", "dist-packages"} & set(resolved.relative_to(root).parts)


async def probe(
    interp: Interpreter, repo: Path, scratch: Path, timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
) -> EnvReport:
    environ = dict(os.environ)
    environ.pop("PYTHONSTARTUP", None)
    captured = await run_captured(
        [str(interp.python), str(PROBE)], cwd=scratch, env=environ, timeout_s=timeout_s, scratch_dir=scratch
    )
    base = EnvReport(
        ok=False, python=str(interp.python), rule=interp.rule, active_env=interp.active_env, repo=str(repo),
        ask_user=interp.ask_user,
    )
    line = next((ln for ln in captured.stdout.splitlines() if ln.startswith(PROBE_MARKER)), None)
    if captured.outcome.timed_out:
        base.import_error = f"the probe did not finish within {timeout_s:.0f}s (import torch hangs?)"
        return base
    if line is None:
        tail = (captured.stderr or captured.stdout).strip().splitlines()[-5:]
        base.import_error = (
            f"the interpreter could not run the probe ({captured.outcome.describe_exit()}): " + " | ".join(tail)
        )
        return base
    data = json.loads(line[len(PROBE_MARKER):])
    base.python_version = data.get("python_version")
    if not data.get("torch_ok"):
        base.import_error = data.get("import_error") or "import torch failed"
        return base
    torch_file = Path(data["torch_file"])
    from_repo = _imported_from_checkout(torch_file, repo)
    base.ok = True
    base.torch = TorchInfo(
        version=data["torch_version"],
        git_version=data.get("torch_git_version"),
        file=str(torch_file),
        imported_from_repo=from_repo,
        import_seconds=data.get("import_seconds"),
        cuda_available=bool(data.get("cuda_available")),
        cuda_version=data.get("cuda_version"),
        gpus=[GpuInfo(**g) for g in data.get("gpus", [])],
        triton_version=data.get("triton_version"),
        log_components=data.get("log_components", []),
        log_artifacts=data.get("log_artifacts", []),
    )
    if not from_repo and (repo / "torch" / "__init__.py").is_file():
        base.warnings.append(
            f"torch is imported from {torch_file.parent}, not from the repository {repo}: edits to the "
            "repository's torch sources will not be exercised by repro or test runs. Use a develop build "
            "(`pip install -e .` / `python setup.py develop`) of the checkout to test a fix."
        )
    elif not from_repo:
        base.warnings.append(
            f"the repository {repo} is not a PyTorch checkout (no torch/__init__.py): reproducing, classifying "
            "and localizing work; the unit test, the main check and the fix need check_env(repo=<a PyTorch "
            "checkout>, ...) with an interpreter that imports torch from it."
        )
    if data.get("test_modules_missing"):
        missing = " ".join(data["test_modules_missing"])
        base.warnings.append(
            f"{missing} cannot be imported by {base.python}: register_test and run_tests need them (torch's test "
            f"harness, torch.testing._internal.common_utils, imports expecttest and numpy; the tests run under "
            f"pytest). Install them there first: {shlex.quote(base.python)} -m pip install {missing}"
        )
    if data.get("log_registry_error"):
        base.warnings.append(f"TORCH_LOGS names could not be read: {data['log_registry_error']}")
    return base
