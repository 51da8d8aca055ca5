"""Typed startup state shared by every tool of one server instance."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.case.paths import confine
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.case.workflow import Workflow


@dataclass
class AppState:
    config: ServerConfig
    store: Store

    @classmethod
    def from_config(cls, config: ServerConfig) -> AppState:
        state = cls(config=config, store=Store(config.state_dir))
        from pt2_bug_basher.execution.runs import recover_interrupted

        recover_interrupted(state.store)
        return state

    def workflow(self, case_id: str) -> Workflow:
        case = self.store.get_case(case_id)
        from pt2_bug_basher.execution.gitstate import tree_hash

        return Workflow(self.store, case_id, lambda: tree_hash(Path(case.repo)))

    def gate(self, tool: ToolName, case_id: str) -> Workflow:
        """The case's workflow, after checking the tool's gate (raises GateClosed)."""
        flow = self.workflow(case_id)
        flow.require(tool)
        return flow

    def case_roots(self, case: CaseRecord) -> tuple[Path, ...]:
        return tuple(dict.fromkeys((Path(case.repo), *self.config.all_roots)))

    def confine(self, case: CaseRecord, path: str, what: str, base: Path | None = None) -> Path:
        return confine(path, self.case_roots(case), what, base=base or Path(case.repo))
