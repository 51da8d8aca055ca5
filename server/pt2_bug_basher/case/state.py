"""Typed startup state shared by every tool of one server instance."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import anyio

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.paths import confine
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.case.workflow import CaseStatus, Workflow
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.names import ToolName


@dataclass
class AppState:
    config: ServerConfig
    store: Store

    recovered: bool = False
    """whether runs left 'running' by a dead server were recovered (once, in the server's lifespan)"""

    @classmethod
    def open(cls, config: ServerConfig) -> AppState:
        """Open the case store (a corrupt or unwritable one fails here, with what to do); nothing runs."""
        store = Store(config.state_dir)
        store.open()
        return cls(config=config, store=store)

    async def recover(self) -> None:
        """Start-up work: mark runs whose server died as interrupted and kill what is left of them."""
        if self.recovered:
            return
        from pt2_bug_basher.execution.runs import recover_interrupted

        await anyio.to_thread.run_sync(recover_interrupted, self.store)
        self.recovered = True

    def workflow(self, case_id: str) -> Workflow:
        case = self.store.get_case(case_id)
        from pt2_bug_basher.execution.gitstate import tree_hash

        return Workflow(self.store, case_id, lambda: tree_hash(Path(case.repo)))

    async def gate(self, tool: ToolName, case_id: str) -> Workflow:
        """The case's workflow, after checking the tool's gate (raises GateClosed).

        Runs in a worker thread: the gate may hash the tree (git diff of the whole checkout)."""

        def check() -> Workflow:
            flow = self.workflow(case_id)
            flow.require(tool)
            return flow

        return await anyio.to_thread.run_sync(check)

    async def status(self, case_id: str) -> CaseStatus:
        """The case's status, computed in a worker thread (it may hash the tree)."""
        return await anyio.to_thread.run_sync(lambda: self.workflow(case_id).status())

    def case_roots(self, case: CaseRecord) -> tuple[Path, ...]:
        return tuple(dict.fromkeys((Path(case.repo), *self.config.all_roots)))

    def confine(self, case: CaseRecord, path: str, what: str, base: Path | None = None) -> Path:
        return confine(path, self.case_roots(case), what, base=base or Path(case.repo))

    def script_file(self, case: CaseRecord, script: str, what: str = "script") -> Path:
        """A script a tool will run: confined to the case's roots, and an existing file."""
        path = self.confine(case, script, what)
        if not path.is_file():
            raise InvalidInput(f"{what} {path} does not exist or is not a file.")
        return path
