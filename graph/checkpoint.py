"""Checkpoints: a SQLite database in the run directory, written synchronously at every step.

With `durability="sync"` each super-step is on disk before the next starts, so a crash, a kill or Ctrl-C
loses at most the node that was running; `resume` continues from there. Only the state's own types may
be read back from a checkpoint (an explicit allowlist, not arbitrary classes).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from kernelblaster.graph import state
from kernelblaster.graph.run_files import RunFiles
from kernelblaster.kb.schema import Category, OutcomeStats
from kernelblaster.kb.selection import SelectedOptimization

DURABILITY: Literal["sync"] = "sync"

CHECKPOINTED_TYPES: tuple[type, ...] = (
    state.KernelRef, state.Candidate, state.Feedback, state.StepEnding, state.StepProgress, state.BaselineSummary,
    state.ProfiledState, state.MatchedState, state.StepRecord, state.TokenUsage, state.LearningNote,
    state.TrajectoryState, SelectedOptimization, OutcomeStats, Category,
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
