"""Startup configuration of a server instance."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

STATE_DIR_NAME = ".pt2-bug-basher"
STATE_DIR_ENV = "PT2_BUG_BASHER_STATE_DIR"
CACHE_DIR_ENV = "PT2_BUG_BASHER_CACHE_DIR"


def machine_cache_dir() -> Path:
    """What the server keeps per machine, not per case (fitted text models, Inductor's ISA probe builds):
    $PT2_BUG_BASHER_CACHE_DIR, else the user's cache directory."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pt2-bug-basher"


@dataclass(frozen=True)
class ServerConfig:
    """Where the case store lives and which directories tools may touch.

    `default_repo` is the repository a case investigates when check_env names none.
    `allowed_roots` bound every path a tool accepts (scripts, test files, repositories);
    the state directory is always allowed.
    """

    state_dir: Path
    default_repo: Path
    allowed_roots: tuple[Path, ...] = field(default_factory=tuple)

    @classmethod
    def from_options(
        cls,
        state_dir: str | os.PathLike[str] | None = None,
        repo: str | os.PathLike[str] | None = None,
        roots: list[str] | tuple[str, ...] | None = None,
    ) -> ServerConfig:
        default_repo = Path(repo or os.getcwd()).resolve()
        env_state = os.environ.get(STATE_DIR_ENV)
        state = Path(state_dir or env_state or default_repo / STATE_DIR_NAME).resolve()
        allowed = [default_repo, *(Path(r).resolve() for r in roots or ())]
        return cls(state_dir=state, default_repo=default_repo, allowed_roots=tuple(dict.fromkeys(allowed)))

    @property
    def all_roots(self) -> tuple[Path, ...]:
        return (*self.allowed_roots, self.state_dir)
