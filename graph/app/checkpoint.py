"""Checkpoints: a SQLite database in the run directory, written synchronously at every step.

With `durability="sync"` each super-step is on disk before the next starts, so a crash, a kill or Ctrl-C
loses at most the node that was running; `resume` continues from there. Only the state's own types may
be read back from a checkpoint (an explicit allowlist, not arbitrary classes).

The database is created with the run, so a missing or emptied one means the run's progress is lost
(`resume --restart` starts it over); one that cannot be read back is reported, never written over.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from kernelblaster.graph.core import state
from kernelblaster.graph.core.run_files import RunFileDamaged, RunFiles
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.harness.gpu_facts import CompilerFacts, GpuFacts, InstructionFacts
from kernelblaster.harness.profile.outcome import KernelShare
from kernelblaster.harness.result import Roofline
from kernelblaster.kb.schema import Category, OutcomeStats
from kernelblaster.kb.selection import SelectedOptimization

DURABILITY: Literal["sync"] = "sync"
SQLITE_HEADER = b"SQLite format 3\x00"
CheckpointsPresence = Literal["missing", "empty", "present"]

CHECKPOINTED_TYPES: tuple[type, ...] = (
    state.KernelRef, state.Candidate, state.Feedback, state.StepEnding, state.StepProgress, state.BaselineSummary,
    state.ProfiledState, state.MatchedState, state.StepRecord, TokenUsage, state.LearningNote,
    state.TrajectoryState, state.RunFacts, GpuFacts, CompilerFacts, InstructionFacts, Roofline, KernelShare,
    SelectedOptimization, OutcomeStats, Category,
)


@contextmanager
def open_checkpointer(files: RunFiles) -> Iterator[SqliteSaver]:
    """The run's checkpointer, open for the block."""
    files.root.mkdir(parents=True, exist_ok=True)
    # Parallel trajectories write from several threads; SqliteSaver serialises them with its own lock.
    connection = sqlite3.connect(files.checkpoints, check_same_thread=False)
    try:
        yield SqliteSaver(connection, serde=serializer())
    finally:
        connection.close()


def serializer() -> JsonPlusSerializer:
    """Reads back only the state's own types."""
    return JsonPlusSerializer(allowed_msgpack_modules=CHECKPOINTED_TYPES)


def thread_config(run_id: str) -> RunnableConfig:
    """The run's thread in its checkpoint database."""
    return {"configurable": {"thread_id": run_id}}


def create_checkpoints(files: RunFiles) -> None:
    """The run's checkpoint database, with its tables and no checkpoint yet."""
    files.root.mkdir(parents=True, exist_ok=True)
    # SQLite would make the file 0644 whatever the umask; made here, it gets the umask's mode like every
    # file of the run (and SQLite gives its -wal and -shm files the database's mode).
    os.close(os.open(files.checkpoints, os.O_WRONLY | os.O_CREAT, 0o666))
    with open_checkpointer(files) as checkpointer:
        checkpointer.setup()


def checkpoints_presence(files: RunFiles, problem: str) -> CheckpointsPresence:
    """Whether the run's checkpoint database is there; `RunFileDamaged` if something else is in its place."""
    path = files.checkpoints
    if not os.path.lexists(path):
        return "missing"
    if path.is_dir():
        raise RunFileDamaged(files, path, "a directory, not a database", problem)
    try:
        with open(path, "rb") as database:
            header = database.read(len(SQLITE_HEADER))
    except OSError as error:
        raise RunFileDamaged(files, path, f"cannot be read: {error.strerror or error}", problem) from None
    if not header:
        return "empty"
    if header != SQLITE_HEADER:
        raise RunFileDamaged(files, path, "not an SQLite database", problem)
    return "present"


def check_checkpoints_readable(files: RunFiles, run_id: str, problem: str) -> None:
    """Read the database through and load the run's latest checkpoint, writing nothing; `RunFileDamaged` if
    either fails."""
    with closing(_read_only_connection(files)) as connection:
        try:
            verdict = connection.execute("PRAGMA quick_check(1)").fetchone()[0]
        except sqlite3.DatabaseError as error:
            raise RunFileDamaged(files, files.checkpoints, str(error), problem) from None
        if verdict != "ok":
            raise RunFileDamaged(files, files.checkpoints, verdict, problem)
        try:
            SqliteSaver(connection, serde=serializer()).get_tuple(thread_config(run_id))
        # Whatever a garbage blob makes the decoder raise: the file is damaged, and that is the user's answer.
        except Exception as error:
            raise RunFileDamaged(files, files.checkpoints, f"its latest checkpoint cannot be decoded: "
                                 f"{type(error).__name__}", problem) from None


def _read_only_connection(files: RunFiles) -> sqlite3.Connection:
    # Read-only never folds the write-ahead log into the file. Without a log beside it, `immutable` also
    # keeps SQLite from creating its -wal and -shm companions; with one (a killed writer's), it must be read.
    path = files.checkpoints.resolve()
    has_log = path.with_name(path.name + "-wal").exists()
    uri = f"{path.as_uri()}?{'mode=ro' if has_log else 'immutable=1'}"
    return sqlite3.connect(uri, uri=True, check_same_thread=False)
