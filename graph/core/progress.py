"""Live progress: the notes nodes write to LangGraph's custom stream, and their one-line rendering.

A note says where the run is (iteration, trajectory, step) and what a node just did; the display adds
the best speedup so far, the tokens used and (with prices) their cost, which the API tracks from the state
updates.
"""

from __future__ import annotations

from typing import TextIO

from langgraph.runtime import Runtime
from pydantic import BaseModel

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.cost import Cost
from kernelblaster.graph.core.state import TrajectoryState
from kernelblaster.tools.untrusted_text import for_terminal


class ProgressNote(BaseModel):
    node: str
    text: str
    iteration: int | None = None
    trajectory: int | None = None
    step: int | None = None

    def where(self) -> str:
        parts = []
        if self.iteration is not None:
            parts.append(f"iter {self.iteration + 1}")
        if self.trajectory is not None:
            parts.append(f"traj {self.trajectory}")
        if self.step is not None:
            parts.append(f"step {self.step + 1}")
        return " ".join(parts) or "run"


def write_note(runtime: Runtime[RunContext], note: ProgressNote) -> None:
    runtime.stream_writer(note)


class Progress(BaseModel):
    """One step of progress: what a node did, the best speedup so far, the tokens used and their cost (None
    without prices)."""

    note: ProgressNote
    best_speedup: float | None
    tokens: int
    cost: Cost | None = None


class ProgressDisplay:
    """Prints one line per note: where, what, the best speedup so far, the tokens used and their cost; control
    characters written out (`tools.untrusted_text.for_terminal`)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def show(self, progress: Progress) -> None:
        note = progress.note
        best = f"best {progress.best_speedup:.2f}x" if progress.best_speedup is not None else "best -"
        cost = f", {progress.cost.display()}" if progress.cost is not None else ""
        line = f"[{note.where():<22}] {note.node:<20} {note.text}"
        # A note may quote a candidate's output (a compiler's or the driver's): shown, never obeyed.
        print(for_terminal(f"{line}  ({best}, {progress.tokens / 1000:.1f}k tokens{cost})"), file=self.out,
              flush=True)


def trajectory_note(node: str, state: TrajectoryState, text: str) -> ProgressNote:
    return ProgressNote(node=node, text=text, iteration=state.iteration, trajectory=state.trajectory,
                        step=state.step)
