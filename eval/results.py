"""The results database of a suite (`results.sqlite`): its configuration, a row per problem, the tokens of
each problem per role, the suite KB's versions, and PyTorch baseline timings.

The schema is versioned (`PRAGMA user_version`); a database written by a newer version of this tool is
refused before anything is written to it, and one written by an older version is brought up to date when
opened (one transaction; `_MIGRATIONS`), or, where it cannot be written, read as it is (its rows have no
machine). Every change is one transaction, so a kill leaves the database as it was before the change or
after it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from kernelblaster.tools.errors import UserFacingError

SCHEMA_VERSION = 2
DATABASE_NAME = "results.sqlite"
BASELINES_KEY = "baselines"

ProblemStatus = Literal["pending", "running", "done", "failed"]
# ok: a correct kernel was found; no_valid_kernel: none was; load_error: the problem file did not load;
# error: the run itself failed (the message says why).
ProblemVerdict = Literal["ok", "no_valid_kernel", "load_error", "error"]
# Why a problem's run stopped before its end: its own token limit, its wall-time budget, or the suite's
# token limit (`eval.suite_tokens`).
StopCause = Literal["tokens", "wall_time", "suite_tokens"]
STOPPED_BY: dict[StopCause, str] = {"tokens": "its token limit", "wall_time": "its wall-time budget",
                                    "suite_tokens": "the suite's token limit"}

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE problems (
    position INTEGER PRIMARY KEY, problem_id TEXT NOT NULL UNIQUE, level INTEGER, number INTEGER,
    path TEXT NOT NULL, status TEXT NOT NULL, run_dir TEXT, gpu TEXT, verdict TEXT,
    eager_ms REAL, compile_ms REAL, initial_ms REAL, best_ms REAL,
    vs_eager REAL, vs_compile REAL, vs_baseline REAL, vs_initial REAL, roofline_fraction REAL,
    tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL, wall_s REAL, best_sha256 TEXT,
    kb_version_before INTEGER, kb_version_after INTEGER, stopped_by TEXT, error TEXT,
    gpu_name TEXT, driver_version TEXT, cuda_runtime TEXT, nvcc_version TEXT, torch_version TEXT
);
CREATE TABLE tokens (
    position INTEGER NOT NULL REFERENCES problems(position), role TEXT NOT NULL, calls INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, PRIMARY KEY (position, role)
);
CREATE TABLE kb_versions (
    version INTEGER PRIMARY KEY, position INTEGER, file TEXT NOT NULL, sha256 TEXT NOT NULL,
    bytes INTEGER NOT NULL, states INTEGER NOT NULL, optimizations INTEGER NOT NULL, techniques INTEGER NOT NULL,
    measured INTEGER NOT NULL, applied INTEGER NOT NULL, rejected INTEGER NOT NULL
);
CREATE TABLE baselines (
    problem_id TEXT PRIMARY KEY, level INTEGER, path TEXT NOT NULL, gpu TEXT, precision TEXT,
    eager_ms REAL, compile_ms REAL, compile_error TEXT, error TEXT,
    published_eager_ms REAL, published_compile_ms REAL
);
"""

# What brings a database of version n up to version n + 1.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: tuple(f"ALTER TABLE problems ADD COLUMN {name} TEXT"
             for name in ("gpu_name", "driver_version", "cuda_runtime", "nvcc_version", "torch_version")),
}


class RoleTokens(BaseModel):
    role: str
    calls: int
    input_tokens: int
    output_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


class ProblemResult(BaseModel):
    """What one finished problem reports: its best kernel against the baselines, its cost, how it ended."""

    verdict: ProblemVerdict
    gpu: str | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    initial_ms: float | None = None
    best_ms: float | None = None
    vs_eager: float | None = None
    vs_compile: float | None = None
    vs_baseline: float | None = None
    vs_initial: float | None = None
    roofline_fraction: float | None = None
    cost_usd: float | None = Field(default=None, description="At the run's prices; None without them")
    wall_s: float | None = None
    best_sha256: str | None = None
    stopped_by: StopCause | None = None
    error: str | None = None
    # The machine (harness.machine.Machine) the problem ran on; None in rows written before machines were
    # recorded. `gpu` above is the suite's slot (gpu0, node/gpu1), this the GPU's name.
    gpu_name: str | None = None
    driver_version: str | None = None
    cuda_runtime: str | None = None
    nvcc_version: str | None = None
    torch_version: str | None = None
    tokens: list[RoleTokens] = []

    @property
    def total_tokens(self) -> int:
        return sum(role.total for role in self.tokens)


class ProblemRow(BaseModel):
    """A problem's row: where it stands in the suite and, once done, its result."""

    position: int
    problem_id: str
    level: int | None
    number: int | None
    path: str
    status: ProblemStatus
    run_dir: str | None = None
    kb_version_before: int | None = None
    kb_version_after: int | None = None
    result: ProblemResult | None = None


class KBVersionRow(BaseModel):
    """One version of the suite's KB: version n holds the learning of the suite's first n problems."""

    version: int
    position: int | None
    file: str
    sha256: str
    bytes: int
    states: int
    optimizations: int
    techniques: int
    measured: int
    applied: int
    rejected: int


class BaselineDirectory(BaseModel):
    """What `bench baseline` records in a database it makes: the one precision policy of all its times."""

    precision: str


class BaselineRow(BaseModel):
    """PyTorch eager and torch.compile times of one problem here, beside KernelBench's published ones."""

    problem_id: str
    level: int | None
    path: str
    gpu: str | None = None
    precision: str | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    compile_error: str | None = None
    error: str | None = None
    published_eager_ms: float | None = None
    published_compile_ms: float | None = None


Model = TypeVar("Model", bound=BaseModel)
_RESULT_COLUMNS = [name for name in ProblemResult.model_fields if name != "tokens"]


class ResultsDB:
    """One suite's results database."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._connection = connection
        self.path = path

    @classmethod
    def open(cls, path: Path, *, create: bool = False) -> ResultsDB:
        """Open (or with `create`, make) the database; one from a newer version is refused untouched."""
        if not path.exists() and not create:
            raise UserFacingError(f"{path.parent}: not a suite directory (no {path.name})")
        connection = sqlite3.connect(path, check_same_thread=False)
        try:
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            tables = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        except sqlite3.DatabaseError as error:
            connection.close()
            raise UserFacingError(f"{path}: not a kernelblaster results database ({error}); left untouched") from None
        if version > SCHEMA_VERSION:
            connection.close()
            raise UserFacingError(f"{path}: written by a newer kernelblaster (results schema v{version}; this one "
                                  f"reads v{SCHEMA_VERSION}); left untouched")
        if version == 0 and (tables or not create):
            # Someone else's database (or an empty file where a suite was expected): never ours to change.
            connection.close()
            raise UserFacingError(f"{path}: not a kernelblaster results database; left untouched")
        if version == 0:
            with connection:
                connection.executescript(_SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION};")
        elif version < SCHEMA_VERSION:
            _migrate(connection)
        return cls(connection, path)

    def close(self) -> None:
        self._connection.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connection:
            yield self._connection

    def get_meta(self, key: str, model: type[Model]) -> Model | None:
        row = self._connection.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        try:
            return model.model_validate_json(row[0]) if row else None
        except ValidationError:
            raise UserFacingError(f"{self.path}: its {key} record is damaged (not a valid {model.__name__}); "
                                  "left untouched") from None

    def set_meta(self, key: str, value: BaseModel) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value.model_dump_json()))

    def delete_meta(self, key: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM meta WHERE key = ?", (key,))

    def add_problems(self, rows: Sequence[ProblemRow]) -> None:
        with self.transaction() as db:
            db.executemany("INSERT INTO problems (position, problem_id, level, number, path, status) "
                           "VALUES (?, ?, ?, ?, ?, ?)",
                           [(r.position, r.problem_id, r.level, r.number, r.path, r.status) for r in rows])

    def problems(self) -> list[ProblemRow]:
        tokens: dict[int, list[RoleTokens]] = {}
        for position, role, calls, inputs, outputs in self._connection.execute(
                "SELECT position, role, calls, input_tokens, output_tokens FROM tokens ORDER BY position, rowid"):
            tokens.setdefault(position, []).append(RoleTokens(role=role, calls=calls, input_tokens=inputs,
                                                              output_tokens=outputs))
        # A database that could not be migrated (read-only) lacks the newer columns: they read as NULL.
        present = {row[1] for row in self._connection.execute("PRAGMA table_info(problems)")}
        columns = [name if name in present else "NULL" for name in _RESULT_COLUMNS]
        cursor = self._connection.execute(
            "SELECT position, problem_id, level, number, path, status, run_dir, kb_version_before, kb_version_after, "
            f"{', '.join(columns)} FROM problems ORDER BY position")
        try:
            return [_problem_row(row, tokens.get(row[0], [])) for row in cursor]
        except ValidationError as error:
            raise UserFacingError(f"{self.path}: a problem's row is damaged ({error.error_count()} invalid "
                                  "field(s)); left untouched") from None

    def mark_running(self, position: int, run_dir: str, kb_version_before: int | None) -> None:
        with self.transaction() as db:
            db.execute("UPDATE problems SET status = 'running', run_dir = ?, kb_version_before = ? WHERE position = ?",
                       (run_dir, kb_version_before, position))

    def record_result(self, position: int, result: ProblemResult, kb_version_after: int | None = None) -> None:
        """Record a finished problem; `kb_version_after` when its learning is already settled (a suite that
        does not learn), else `record_version` sets it once the suite's KB holds its learning."""
        status = "done" if result.verdict in ("ok", "no_valid_kernel") else "failed"
        values = [getattr(result, name) for name in _RESULT_COLUMNS]
        with self.transaction() as db:
            db.execute(f"UPDATE problems SET status = ?, tokens = ?, kb_version_after = ?, "
                       f"{', '.join(f'{c} = ?' for c in _RESULT_COLUMNS)} WHERE position = ?",
                       (status, result.total_tokens, kb_version_after, *values, position))
            db.execute("DELETE FROM tokens WHERE position = ?", (position,))
            db.executemany("INSERT INTO tokens VALUES (?, ?, ?, ?, ?)",
                           [(position, t.role, t.calls, t.input_tokens, t.output_tokens) for t in result.tokens])

    def record_version(self, version: KBVersionRow) -> None:
        """Record a KB version and, for the problem it learned from, that its learning is in the suite's KB."""
        with self.transaction() as db:
            db.execute(f"INSERT OR REPLACE INTO kb_versions VALUES ({', '.join('?' * len(KBVersionRow.model_fields))})",
                       tuple(version.model_dump().values()))
            if version.position is not None:
                db.execute("UPDATE problems SET kb_version_after = ? WHERE position = ?",
                           (version.version, version.position))

    def versions(self) -> list[KBVersionRow]:
        columns = list(KBVersionRow.model_fields)
        cursor = self._connection.execute(f"SELECT {', '.join(columns)} FROM kb_versions ORDER BY version")
        return [KBVersionRow(**dict(zip(columns, row, strict=True))) for row in cursor]

    def record_baseline(self, row: BaselineRow) -> None:
        with self.transaction() as db:
            db.execute(f"INSERT OR REPLACE INTO baselines VALUES ({', '.join('?' * len(BaselineRow.model_fields))})",
                       tuple(row.model_dump().values()))

    def baselines(self) -> list[BaselineRow]:
        columns = list(BaselineRow.model_fields)
        cursor = self._connection.execute(f"SELECT {', '.join(columns)} FROM baselines ORDER BY rowid")
        return [BaselineRow(**dict(zip(columns, row, strict=True))) for row in cursor]

    def holds_baselines(self) -> bool:
        """Whether `bench baseline` made the database (one older than its meta record is known by its rows)."""
        return self.get_meta(BASELINES_KEY, BaselineDirectory) is not None or bool(self.baselines())


def _migrate(connection: sqlite3.Connection) -> None:
    """Bring an older database up to SCHEMA_VERSION in one transaction (another process may have done it while
    this one waited for the lock); leave it as it is where it cannot be written."""
    try:
        connection.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:  # read-only (a file, a folder or a mount): read it as it is
        return
    try:
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        for step in range(version, SCHEMA_VERSION):
            for statement in _MIGRATIONS[step]:
                connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        connection.commit()
    except sqlite3.OperationalError:
        connection.rollback()


def _problem_row(row: tuple[Any, ...], tokens: list[RoleTokens]) -> ProblemRow:
    position, problem_id, level, number, path, status, run_dir, before, after, *result = row
    measured = dict(zip(_RESULT_COLUMNS, result, strict=True))
    return ProblemRow(position=position, problem_id=problem_id, level=level, number=number, path=path, status=status,
                      run_dir=run_dir, kb_version_before=before, kb_version_after=after,
                      result=ProblemResult(**measured, tokens=tokens) if measured["verdict"] else None)
