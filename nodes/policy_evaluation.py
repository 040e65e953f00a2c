"""`policy_evaluation`: the first half of the textual gradient — compare what the KB predicted for each
step of the iteration with what was measured, and summarise the differences in words. It sees each step's
evidence (`step_evidence`): what the agent changed and why, and the kernel before and after.
"""

from __future__ import annotations

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import LearningStage, OptimizationState, RunUpdate
from kernelblaster.harness.problem import Problem
from kernelblaster.nodes.learning import ask_learning_role, iteration_steps, skipped_note
from kernelblaster.nodes.prompting import answer_limits, load_prompt
from kernelblaster.nodes.step_evidence import render_evidence

NODE: LearningStage = "policy_evaluation"


class Discrepancy(BaseModel):
    state_id: str
    technique: str
    predicted_speedup: float | None
    outcome: str = Field(max_length=300, description="The measured speedup, or how the attempts failed")
    comment: str = Field(max_length=500)


class PolicyEvaluation(BaseModel):
    """Predicted against measured, for one iteration."""

    summary: str = Field(max_length=3000,
                         description="The key differences between prediction and outcome, in a paragraph")
    discrepancies: list[Discrepancy] = Field(default_factory=list, max_length=20)


def policy_evaluation(state: OptimizationState, runtime: Runtime[RunContext], *,
                      resources: RunResources) -> RunUpdate:
    steps = iteration_steps(state)
    if not steps:
        return {"learning": [skipped_note(state.iteration, NODE, "no steps were taken in this iteration")]}
    question = load_prompt(NODE).question(
        role="policy_evaluation", node=NODE, key=f"i{state.iteration}.{NODE}", schema=PolicyEvaluation,
        problem=describe_problem(resources.problem), iteration=state.iteration + 1,
        replay=render_evidence(resources, steps), limits=answer_limits(PolicyEvaluation),
    )
    return ask_learning_role(resources, runtime, state.iteration, NODE, question,
                             summary_of=lambda value: value.summary)


def describe_problem(problem: Problem) -> str:
    return f"{problem.name}:\n```python\n{problem.source}\n```"
