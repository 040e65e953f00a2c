"""`policy_evaluation`: the first half of the textual gradient — compare what the KB predicted for each
step of the iteration with what was measured, and summarise the differences in words.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from kernelblaster.graph.agents import AgentFailed, Question
from kernelblaster.graph.context import RunContext
from kernelblaster.graph.progress import ProgressNote, write_note
from kernelblaster.graph.services import RunResources, Services
from kernelblaster.graph.state import LearningNote, OptimizationState, StepRecord
from kernelblaster.harness.problem import Problem
from kernelblaster.nodes.prompting import load_prompt

NODE = "policy_evaluation"


class Discrepancy(BaseModel):
    state_id: str
    technique: str
    predicted_speedup: float | None
    outcome: str = Field(description="The measured speedup, or how the attempts failed")
    comment: str


class PolicyEvaluation(BaseModel):
    """Predicted against measured, for one iteration."""

    summary: str = Field(description="The key differences between prediction and outcome, in a paragraph")
    discrepancies: list[Discrepancy] = Field(default_factory=list)


def policy_evaluation(state: OptimizationState, runtime: Runtime[RunContext], *,
                      services: Services) -> dict[str, object]:
    steps = iteration_steps(state)
    if not steps:
        return {"learning": [skipped_note(state.iteration, NODE, "no steps were taken in this iteration")]}
    resources = services.for_run(runtime.context, state.problem_path, state.run_dir)
    question = load_prompt(NODE).question(
        role="policy_evaluation", node=NODE, key=f"i{state.iteration}.{NODE}", schema=PolicyEvaluation,
        problem=describe_problem(resources.problem), iteration=state.iteration + 1,
        replay="\n".join(describe_step(step) for step in steps),
    )
    return ask_learning_role(resources, runtime, state.iteration, NODE, question,
                             summary_of=lambda value: value.summary)


def iteration_steps(state: OptimizationState) -> list[StepRecord]:
    return [step for step in state.steps if step.iteration == state.iteration]


def ask_learning_role(resources: RunResources, runtime: Runtime[RunContext], iteration: int, node: str,
                      question: Question, summary_of: Callable[[Any], str]) -> dict[str, object]:
    """Ask one textual-gradient role (named like its node) and keep its answer as the iteration's learning
    note; a failed ask is recorded as a skipped note, never a crash of the run."""
    try:
        answer = resources.agent(node).ask(question)
    except AgentFailed as failure:
        return {"learning": [skipped_note(iteration, node, str(failure))], "token_usage": [failure.usage]}
    path = resources.files.save(resources.files.learning_path(iteration, node), answer.value)
    summary = summary_of(answer.value)
    write_note(runtime, ProgressNote(node=node, iteration=iteration, text=summary[:160]))
    note = LearningNote(iteration=iteration, stage=node, summary=summary[:500], path=path)
    return {"learning": [note], "token_usage": [answer.usage]}


def skipped_note(iteration: int, stage: str, why: str) -> LearningNote:
    return LearningNote(iteration=iteration, stage=stage, summary=f"skipped: {why}", path=None)


def describe_problem(problem: Problem) -> str:
    return f"{problem.name}:\n```python\n{problem.source}\n```"


def describe_step(step: StepRecord) -> str:
    predicted = f"predicted {step.predicted_speedup:.2f}x" if step.predicted_speedup is not None else "no prediction"
    if step.speedup is not None:
        outcome = f"{step.outcome}, {step.speedup:.2f}x"
    else:
        outcome = f"{step.outcome}: {step.detail[:300]}"
    return (f"- iteration {step.iteration + 1}, trajectory {step.trajectory}, step {step.step + 1}: state "
            f"{step.state_id} ({step.state_name}); {step.technique or 'no code written'}: {predicted} -> {outcome} "
            f"({step.attempts} attempt(s))")
