"""`policy_evaluation`: the first half of the textual gradient — compare what the KB predicted for each
step of the iteration with what was measured, and summarise the differences in words.
"""

from __future__ import annotations

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from kernelblaster.graph.context import RunContext
from kernelblaster.graph.services import RunResources
from kernelblaster.graph.state import LearningStage, OptimizationState, StepRecord
from kernelblaster.harness.problem import Problem
from kernelblaster.nodes.learning import ask_learning_role, iteration_steps, skipped_note
from kernelblaster.nodes.prompting import load_prompt

NODE: LearningStage = "policy_evaluation"


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
                      resources: RunResources) -> dict[str, object]:
    steps = iteration_steps(state)
    if not steps:
        return {"learning": [skipped_note(state.iteration, NODE, "no steps were taken in this iteration")]}
    question = load_prompt(NODE).question(
        role="policy_evaluation", node=NODE, key=f"i{state.iteration}.{NODE}", schema=PolicyEvaluation,
        problem=describe_problem(resources.problem), iteration=state.iteration + 1,
        replay="\n".join(describe_step(step) for step in steps),
    )
    return ask_learning_role(resources, runtime, state.iteration, NODE, question,
                             summary_of=lambda value: value.summary)


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
