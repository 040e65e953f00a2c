"""`start_iteration`: count the iteration whose trajectories are about to fan out from the best kernel."""

from __future__ import annotations

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import ProgressNote, write_note
from kernelblaster.graph.core.state import OptimizationState, RunUpdate


def start_iteration(state: OptimizationState, runtime: Runtime[RunContext]) -> RunUpdate:
    iteration = state.iteration + 1
    best = state.best.label if state.best else "none"
    write_note(runtime, ProgressNote(node="start_iteration", iteration=iteration,
                                     text=f"{runtime.context.trajectories} trajectories from {best}"))
    return {"iteration": iteration}
