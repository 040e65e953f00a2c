"""A suite directory: its configuration and results database, its KB versions, one run directory per
problem, and the lock that lets one runner at a time use it.

    SUITE_DIR/results.sqlite    configuration, a row per problem, KB versions (eval.results)
    SUITE_DIR/kb/               the suite's KB versions; kb.json is the newest (eval.suite_kb)
    SUITE_DIR/problems/NNN-...  the run directory of each problem (checkpoints, kernels, report)
    SUITE_DIR/work/NNN/         each problem's working copy of the KB (with, once the problem is done, only
                                its last snapshot) and its wall-time count
    SUITE_DIR/report/           what `kernelblaster bench report` writes
    SUITE_DIR/stop_request.txt  while the suite is stopping at its token limit (eval.suite_tokens)
"""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from kernelblaster.eval.problems import Order, SuiteProblem
from kernelblaster.eval.results import DATABASE_NAME, ProblemRow, ResultsDB
from kernelblaster.eval.suite_kb import SuiteKB
from kernelblaster.eval.worker import ProblemBudget
from kernelblaster.graph.core.context import Memory, RunContext
from kernelblaster.kb.paths import seed_kb_bytes
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import directory_problem

# continual: start from the user's KB and learn; fresh: start from the seed KB and learn; frozen: read the
# user's KB, never write it; none: no KB at all.
MemoryMode = Literal["continual", "fresh", "frozen", "none"]
RUN_MEMORY: dict[str, Memory] = {"continual": "learn", "fresh": "learn", "frozen": "frozen", "none": "none"}
CONFIG_KEY = "config"
ENDING_KEY = "ending"
LOCK_NAME = ".runner.lock"
BASELINES_ONLY = "the PyTorch baselines of `kernelblaster bench baseline`"


class SuiteConfig(BaseModel):
    """How a suite runs; fixed when it is created, so a resumed suite runs as it started."""

    source: str
    selection: str = Field(description="The levels and problems chosen, as given")
    order: Order
    shuffle_seed: int
    problems: list[SuiteProblem]
    context: RunContext = Field(description="Every problem's run context, less its run directory and KB")
    memory: MemoryMode
    start_kb: str = Field(description="The KB file the suite's version 0 was copied from, or `seed`")
    budget: ProblemBudget
    window: int = Field(ge=1, description="Problems in flight at once; fixes the KB version each starts from")
    token_limit: int | None = Field(default=None, gt=0, description="Tokens the suite's problems may spend "
                                    "together (`eval.suite_tokens`); None: no limit but each problem's own")
    gpus: tuple[int, ...]
    token: str = Field(default_factory=lambda: secrets.token_hex(3),
                       description="Makes this suite's run ids, and so its KB event ids, its own")
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC).replace(microsecond=0))

    @property
    def learns(self) -> bool:
        return RUN_MEMORY[self.memory] == "learn" and self.context.agent == "full"

    @property
    def ablation(self) -> str:
        """The switches that differ from the full method, in words (`full method` if none)."""
        parts = [f"memory {self.memory}"] if self.memory != "continual" else []
        if self.context.profile_feedback != "full":
            parts.append(f"signature {self.context.profile_feedback}")
        if self.context.agent != "full":
            parts.append(f"agent {self.context.agent}")
        return ", ".join(parts) or "full method"


class SuiteEnding(BaseModel):
    """How the suite's last session ended: every problem run, or stopped at the suite's token limit."""

    reason: Literal["finished", "token_limit"]
    detail: str
    tokens: int = Field(description="Tokens the suite had spent, as its runner counted them")
    left: int = Field(description="Problems not started, or interrupted and not resumed")


class Suite:
    """An open suite directory."""

    def __init__(self, root: Path, db: ResultsDB, config: SuiteConfig) -> None:
        self.root = root
        self.db = db
        self.config = config

    @property
    def kb_directory(self) -> Path:
        return self.root / "kb"

    def run_dir(self, position: int) -> Path:
        slug = self.config.problems[position].slug
        return self.root / "problems" / f"{position:03d}-{slug}-{self.config.token}"

    def work_dir(self, position: int) -> Path:
        """What a problem's run uses beside its run directory (which holds only the run's own files)."""
        return self.root / "work" / f"{position:03d}"

    def work_kb(self, position: int) -> Path:
        """The working copy of the KB that a problem's run learns into (`eval.suite_kb` merges its journal)."""
        return self.work_dir(position) / "kb.json"

    @property
    def stop_request(self) -> Path:
        return self.root / "stop_request.txt"

    def kb(self) -> SuiteKB:
        return SuiteKB(self.kb_directory, self.db.versions())

    def set_token_limit(self, limit: int) -> None:
        """Give the suite a new token limit, for this session and those after it."""
        self.config = SuiteConfig.model_validate(self.config.model_dump() | {"token_limit": limit})
        self.db.set_meta(CONFIG_KEY, self.config)

    def ending(self) -> SuiteEnding | None:
        """How the suite's last session ended; None if none has ended (the suite is running, or was killed)."""
        return self.db.get_meta(ENDING_KEY, SuiteEnding)

    def record_ending(self, ending: SuiteEnding | None) -> None:
        """Record how the session ended, or (None) that a session is under way."""
        if ending is None:
            self.db.delete_meta(ENDING_KEY)
        else:
            self.db.set_meta(ENDING_KEY, ending)


def create_suite(root: Path, config: SuiteConfig) -> Suite:
    """Make the suite directory: database, problem rows, KB version 0. Refused if it already holds a suite."""
    if (root / DATABASE_NAME).exists():
        if _holds_baselines_only(root):
            raise UserFacingError(f"{root} holds {BASELINES_ONLY}; give the suite another --out directory")
        raise UserFacingError(f"{root} already holds a suite: continue it with `kernelblaster bench resume {root}`")
    root.mkdir(parents=True, exist_ok=True)
    db = ResultsDB.open(root / DATABASE_NAME, create=True)
    suite = Suite(root, db, config)
    db.add_problems([ProblemRow(position=position, problem_id=p.id, level=p.level, number=p.number, path=p.path,
                                status="pending") for position, p in enumerate(config.problems)])
    _, version = SuiteKB.start(suite.kb_directory, _start_kb_bytes(config))
    db.record_version(version)
    db.set_meta(CONFIG_KEY, config)
    return suite


def open_suite(root: Path) -> Suite:
    db = ResultsDB.open(root / DATABASE_NAME)
    config = db.get_meta(CONFIG_KEY, SuiteConfig)
    if config is None:
        baselines_only = db.holds_baselines()
        db.close()
        if baselines_only:
            raise UserFacingError(f"{root} holds {BASELINES_ONLY}, not a suite (their comparison: baseline.md there)")
        raise UserFacingError(f"{root}: the suite was interrupted while it was being created; "
                              "remove it and start again")
    return Suite(root, db, config)


def _holds_baselines_only(root: Path) -> bool:
    db = ResultsDB.open(root / DATABASE_NAME)
    try:
        return db.get_meta(CONFIG_KEY, SuiteConfig) is None and db.holds_baselines()
    finally:
        db.close()


@contextmanager
def runner_lock(root: Path) -> Iterator[None]:
    """Hold the suite for one runner; another runner is refused while it runs. A `root` that cannot be one is
    refused in one line before anything is written (see `_require_results_directory`)."""
    _require_results_directory(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:  # directory_problem cannot foresee every refusal (/proc, a full disk)
        raise UserFacingError(f"the directory {root} cannot be used ({error.strerror or error})") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 32, 0).decode(errors="replace").strip() or "?"
            raise UserFacingError(f"{root} is in use by another suite runner (pid {holder}); "
                                  "one runner per suite directory") from None
        os.ftruncate(handle, 0)
        os.pwrite(handle, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(handle)


def _require_results_directory(root: Path) -> None:
    """Refuse a `root` that cannot hold a suite's (or `bench baseline`'s) files: a file, a folder that cannot be
    created or written, or a folder of other files; a suite keeps its files apart, as a run does. A folder that
    holds a results database is one of ours: `create_suite`, `open_suite` and the baselines say what it holds."""
    problem = directory_problem(root)
    if problem is not None:
        raise UserFacingError(f"the directory {root} {problem}")
    if _holds_other_files(root):
        raise UserFacingError(f"the directory {root} is not empty and holds no suite or baselines; name a new one "
                              "(a suite keeps its files apart from everything else)")


def _holds_other_files(root: Path) -> bool:
    if not root.is_dir() or (root / DATABASE_NAME).exists():
        return False
    try:
        # The lock a refused or killed runner left behind is the suite's own, not another's file.
        return any(entry.name != LOCK_NAME for entry in root.iterdir())
    except OSError as error:
        raise UserFacingError(f"the directory {root} cannot be read ({error.strerror or error})") from None


def _start_kb_bytes(config: SuiteConfig) -> bytes:
    """The seed KB (memory fresh), else the KB file the suite starts from, or the seed if there is none yet."""
    if config.start_kb == "seed":
        return seed_kb_bytes()
    path = Path(config.start_kb)
    return path.read_bytes() if path.exists() else seed_kb_bytes()
