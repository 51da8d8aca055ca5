"""The case store: SQLite in WAL mode under the state directory.

Every operation opens its own short-lived connection, so threads, concurrent tool calls and
several server processes can share one store. Writes are single transactions.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pt2_bug_basher.domain.errors import BugBasherError, NotFound
from pt2_bug_basher.domain.evidence import EvidencePayload, LocalizeRecord, P, lenient, load_payload, model_for

SCHEMA_VERSION = 1
LOCALIZE_KV = "localize:{case_id}"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cases (
    case_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    repo TEXT NOT NULL,
    python TEXT NOT NULL,
    env_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS evidence (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id TEXT NOT NULL REFERENCES cases(case_id),
    step TEXT NOT NULL,
    ok INTEGER NOT NULL,
    tree_hash TEXT,
    run_id TEXT,
    summary TEXT NOT NULL,
    data_json TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS evidence_case_step ON evidence(case_id, step, id);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    case_id TEXT NOT NULL REFERENCES cases(case_id),
    tool TEXT NOT NULL,
    argv_json TEXT NOT NULL,
    cwd TEXT NOT NULL,
    env_json TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    signal TEXT,
    pid INTEGER,
    server_pid INTEGER,
    started_at REAL NOT NULL,
    ended_at REAL,
    stdout_path TEXT,
    stderr_path TEXT,
    result_json TEXT
);
CREATE INDEX IF NOT EXISTS runs_case ON runs(case_id, started_at);
CREATE TABLE IF NOT EXISTS waivers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id TEXT NOT NULL REFERENCES cases(case_id),
    step TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class StoreError(BugBasherError):
    """The store cannot be opened or written."""


@dataclass(frozen=True)
class CaseRecord:
    case_id: str
    created_at: float
    repo: str
    python: str
    env: dict[str, Any]

    @property
    def torch_from_repo(self) -> bool:
        """check_env saw torch imported from the repository (a develop build)."""
        return bool((self.env.get("torch") or {}).get("imported_from_repo"))

    @property
    def torch_dir(self) -> Path | None:
        """The torch package check_env saw the case's interpreter import."""
        found = (self.env.get("torch") or {}).get("file")
        return Path(found).parent if isinstance(found, str) and found else None


@dataclass(frozen=True)
class EvidenceRecord:
    id: int
    case_id: str
    step: str
    ok: bool
    tree_hash: str | None
    run_id: str | None
    summary: str
    data: EvidencePayload
    """the step's own payload model (domain.evidence), read back from its JSON"""
    created_at: float

    def payload(self, model: type[P]) -> P:
        """The payload as `model`, the step's own evidence model."""
        if isinstance(self.data, model):
            return self.data
        return lenient(model, self.data.model_dump())


@dataclass(frozen=True)
class WaiverRecord:
    case_id: str
    step: str
    reason: str
    created_at: float


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    case_id: str
    tool: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    status: str
    exit_code: int | None
    signal: str | None
    pid: int | None
    server_pid: int | None
    started_at: float
    ended_at: float | None
    stdout_path: str | None
    stderr_path: str | None
    result: dict[str, Any] | None


def new_id(prefix: str) -> str:
    return f"{prefix}-{time.strftime('%Y%m%d')}-{secrets.token_hex(4)}"


class Store:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / "cases.sqlite3"
        self.busy_timeout_s = 30.0
        self._initialised = False

    # -- plumbing -----------------------------------------------------------------

    def _ensure_dir(self) -> None:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            ignore = self.state_dir / ".gitignore"
            if not ignore.exists():
                # Keeps the state directory out of `git status` and out of the tree hash.
                ignore.write_text("*\n")
        except OSError as exc:
            raise StoreError(
                f"cannot create the state directory {self.state_dir}: {exc.strerror or exc}. "
                "Start the server with --state-dir pointing at a writable directory."
            ) from exc

    def open(self) -> None:
        """Create or check the store now (it is otherwise opened on first use)."""
        if not self._initialised:
            self._init()

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        if not self._initialised:
            self._init()
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the case store {self.path}: {exc}") from exc
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            yield conn
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"the case store {self.path} failed: {exc}. If it is corrupt, move it aside and "
                "start again; if it is locked, another process holds a long write."
            ) from exc
        finally:
            conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _init(self) -> None:
        self._ensure_dir()
        try:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            try:
                conn.execute("PRAGMA busy_timeout = 30000")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.executescript(_SCHEMA)
                conn.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"the case store {self.path} cannot be opened: {exc}. If it is corrupt, move it aside "
                "(the server then starts a new one) or point --state-dir elsewhere."
            ) from exc
        self._initialised = True

    # -- cases ----------------------------------------------------------------------

    def create_case(self, repo: str, python: str, env: dict[str, Any]) -> CaseRecord:
        case = CaseRecord(new_id("case"), time.time(), repo, python, env)
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO cases(case_id, created_at, repo, python, env_json) VALUES (?, ?, ?, ?, ?)",
                (case.case_id, case.created_at, repo, python, json.dumps(env)),
            )
        return case

    def get_case(self, case_id: str) -> CaseRecord:
        with self.connect() as conn:
            row = conn.execute("SELECT * FROM cases WHERE case_id = ?", (case_id,)).fetchone()
        if row is None:
            raise NotFound(
                f"unknown case_id {case_id!r}. Call check_env() to start a case, or get_workflow() "
                "with no case_id to read the method; `pt2-bug-basher cases` lists the cases in a store."
            )
        return CaseRecord(row["case_id"], row["created_at"], row["repo"], row["python"], json.loads(row["env_json"]))

    def list_cases(self) -> list[CaseRecord]:
        with self.connect() as conn:
            rows = conn.execute("SELECT * FROM cases ORDER BY created_at").fetchall()
        return [CaseRecord(r["case_id"], r["created_at"], r["repo"], r["python"], json.loads(r["env_json"]))
                for r in rows]

    # -- evidence -------------------------------------------------------------------

    def add_evidence(
        self,
        case_id: str,
        step: str,
        ok: bool,
        summary: str,
        data: EvidencePayload | None = None,
        tree_hash: str | None = None,
        run_id: str | None = None,
    ) -> EvidenceRecord:
        step = getattr(step, "value", step)
        model = model_for(step)
        if data is None:
            data = model()
        elif not isinstance(data, model):
            raise TypeError(f"evidence for step {step!r} must be a {model.__name__}, not {type(data).__name__}")
        now = time.time()
        with self.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO evidence(case_id, step, ok, tree_hash, run_id, summary, data_json, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (case_id, step, int(ok), tree_hash, run_id, summary, data.model_dump_json(), now),
            )
            evidence_id = cur.lastrowid
        return EvidenceRecord(evidence_id or 0, case_id, step, ok, tree_hash, run_id, summary, data, now)

    def evidence(self, case_id: str, step: str | None = None) -> list[EvidenceRecord]:
        query = "SELECT * FROM evidence WHERE case_id = ?"
        params: tuple[Any, ...] = (case_id,)
        if step is not None:
            query += " AND step = ?"
            params += (step,)
        with self.connect() as conn:
            rows = conn.execute(query + " ORDER BY id", params).fetchall()
        return [
            EvidenceRecord(
                r["id"], r["case_id"], r["step"], bool(r["ok"]), r["tree_hash"], r["run_id"], r["summary"],
                load_payload(r["step"], _json_object(r["data_json"])), r["created_at"],
            )
            for r in rows
        ]

    # -- waivers --------------------------------------------------------------------

    def add_waiver(self, case_id: str, step: str, reason: str) -> WaiverRecord:
        waiver = WaiverRecord(case_id, step, reason, time.time())
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO waivers(case_id, step, reason, created_at) VALUES (?, ?, ?, ?)",
                (case_id, step, reason, waiver.created_at),
            )
        return waiver

    def waivers(self, case_id: str) -> list[WaiverRecord]:
        with self.connect() as conn:
            rows = conn.execute("SELECT * FROM waivers WHERE case_id = ? ORDER BY id", (case_id,)).fetchall()
        return [WaiverRecord(r["case_id"], r["step"], r["reason"], r["created_at"]) for r in rows]

    # -- runs -----------------------------------------------------------------------

    def start_run(
        self,
        case_id: str,
        tool: str,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        stdout_path: str,
        stderr_path: str,
        server_pid: int,
        run_id: str | None = None,
    ) -> str:
        run_id = run_id or new_id("run")
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO runs(run_id, case_id, tool, argv_json, cwd, env_json, status, started_at, "
                "stdout_path, stderr_path, server_pid) VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)",
                (run_id, case_id, tool, json.dumps(argv), cwd, json.dumps(env), time.time(),
                 stdout_path, stderr_path, server_pid),
            )
        return run_id

    def set_run_pid(self, run_id: str, pid: int) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE runs SET pid = ? WHERE run_id = ?", (pid, run_id))

    def finish_run(
        self,
        run_id: str,
        status: str,
        exit_code: int | None,
        signal_name: str | None,
        result: dict[str, Any] | None = None,
    ) -> None:
        with self.transaction() as conn:
            conn.execute(
                "UPDATE runs SET status = ?, exit_code = ?, signal = ?, ended_at = ?, result_json = ? WHERE run_id = ?",
                (status, exit_code, signal_name, time.time(), json.dumps(result) if result is not None else None,
                 run_id),
            )

    def set_run_result(self, run_id: str, result: dict[str, Any]) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE runs SET result_json = ? WHERE run_id = ?", (json.dumps(result), run_id))

    def get_run(self, run_id: str, case_id: str | None = None) -> RunRecord:
        with self.connect() as conn:
            row = conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None or (case_id is not None and row["case_id"] != case_id):
            raise NotFound(f"unknown run_id {run_id!r}" + (f" in case {case_id}" if case_id else "")
                           + ". get_workflow(case_id) lists the case's runs.")
        return _run_record(row)

    def runs(self, case_id: str) -> list[RunRecord]:
        with self.connect() as conn:
            rows = conn.execute("SELECT * FROM runs WHERE case_id = ? ORDER BY started_at", (case_id,)).fetchall()
        return [_run_record(r) for r in rows]

    def running_runs(self) -> list[RunRecord]:
        with self.connect() as conn:
            rows = conn.execute("SELECT * FROM runs WHERE status = 'running'").fetchall()
        return [_run_record(r) for r in rows]

    # -- key/value ------------------------------------------------------------------

    def get_kv(self, key: str, default: str | None = None) -> str | None:
        with self.connect() as conn:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return default if row is None else row["value"]

    def set_kv(self, key: str, value: str) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO kv(key, value) VALUES (?, ?)", (key, value))

    def set_localization(self, case_id: str, record: LocalizeRecord) -> None:
        """What localize found (it completes no step of its own): kept beside the case's evidence."""
        self.set_kv(LOCALIZE_KV.format(case_id=case_id), record.model_dump_json())

    def localization(self, case_id: str) -> LocalizeRecord | None:
        """What localize recorded for the case, if it ran."""
        raw = self.get_kv(LOCALIZE_KV.format(case_id=case_id))
        if not raw:
            return None
        return lenient(LocalizeRecord, _json_object(raw))

    def case_dir(self, case_id: str) -> Path:
        path = self.state_dir / "cases" / case_id
        path.mkdir(parents=True, exist_ok=True)
        return path


def _run_record(r: sqlite3.Row) -> RunRecord:
    return RunRecord(
        run_id=r["run_id"], case_id=r["case_id"], tool=r["tool"], argv=json.loads(r["argv_json"]), cwd=r["cwd"],
        env=json.loads(r["env_json"]), status=r["status"], exit_code=r["exit_code"], signal=r["signal"],
        pid=r["pid"], server_pid=r["server_pid"], started_at=r["started_at"], ended_at=r["ended_at"],
        stdout_path=r["stdout_path"], stderr_path=r["stderr_path"],
        result=json.loads(r["result_json"]) if r["result_json"] else None,
    )


def _json_object(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return {}
