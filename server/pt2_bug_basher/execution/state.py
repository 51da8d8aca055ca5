"""Typed startup state shared by every tool of one server instance."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import anyio

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.paths import confine, resolve_path, within
from pt2_bug_basher.case.scripts import CaseScript, keep_copy
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

    def script_file(self, case: CaseRecord, script: str, what: str = "script", *, copy_outside: bool = True) -> Path:
        """A script a tool will run: see case_script."""
        return self.case_script(case, script, what, copy_outside=copy_outside).path

    def case_script(self, case: CaseRecord, script: str, what: str = "script", *,
                    copy_outside: bool = True) -> CaseScript:
        """A script a tool will run: an existing file under the case's roots, run in place; a Python file
        anywhere else (copy_outside) is copied into the case's directory, and the copy runs."""
        resolved = resolve_path(script, what, base=Path(case.repo))
        inside = within(resolved, self.case_roots(case))
        if inside or not copy_outside:
            path = resolved if inside else self.confine(case, script, what)
            if not path.is_file():
                raise InvalidInput(f"{what} {path} does not exist or is not a file.")
            return CaseScript(path)
        if not resolved.exists():
            raise InvalidInput(f"{what} {resolved} does not exist or is not a file.")
        return CaseScript(keep_copy(self.store.case_dir(case.case_id), resolved, what), origin=resolved)
