"""What the three textual-gradient nodes (policy_evaluation, perf_gap_analysis, parameter_update) share:
the iteration's steps and learning notes, and asking a learning role for the iteration's note.
"""

from __future__ import annotations

from collections.abc import Callable

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import ProgressNote, write_note
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import LearningNote, LearningStage, OptimizationState, RunUpdate, StepRecord
from kernelblaster.graph.llm.agents import AgentFailed, Question, T


def iteration_steps(state: OptimizationState) -> list[StepRecord]:
    return [step for step in state.steps if step.iteration == state.iteration]


def learning_note(state: OptimizationState, stage: LearningStage) -> LearningNote | None:
    """This iteration's note of `stage`, if that stage ran."""
    return next((n for n in reversed(state.learning) if n.iteration == state.iteration and n.stage == stage), None)


def skipped_note(iteration: int, stage: LearningStage, why: str) -> LearningNote:
    return LearningNote(iteration=iteration, stage=stage, summary=f"skipped: {why}", path=None)


def ask_learning_role(resources: RunResources, runtime: Runtime[RunContext], iteration: int, stage: LearningStage,
                      question: Question[T], summary_of: Callable[[T], str]) -> RunUpdate:
    """Ask the question's learning role and keep its answer as the iteration's note of `stage`; a failed ask is
    recorded as a skipped note, never a crash of the run."""
    try:
        answer = resources.ask(question)
    except AgentFailed as failure:
        return {"learning": [skipped_note(iteration, stage, str(failure))], "token_usage": [failure.usage]}
    path = resources.files.save(resources.files.learning_path(iteration, stage), answer.value)
    summary = summary_of(answer.value)
    write_note(runtime, ProgressNote(node=stage, iteration=iteration, text=summary[:160]))
    note = LearningNote(iteration=iteration, stage=stage, summary=summary[:500], path=path)
    return {"learning": [note], "token_usage": [answer.usage]}
