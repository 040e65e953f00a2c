"""`perf_gap_analysis`: the second half of the textual gradient — why the outcomes of the iteration
differ from the KB's predictions, reasoned from the policy evaluation and each step's evidence
(`step_evidence`: the agent's explanation, the diff, the kernels' times and profiles before and after).
"""

from __future__ import annotations

from typing import Annotated

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field, StringConstraints

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import LearningStage, OptimizationState, RunUpdate
from kernelblaster.nodes.learning import ask_learning_role, iteration_steps, learning_note, skipped_note
from kernelblaster.nodes.prompting import answer_limits, load_prompt
from kernelblaster.nodes.step_evidence import render_evidence

NODE: LearningStage = "perf_gap_analysis"
Item = Annotated[str, StringConstraints(max_length=500)]


class GapAnalysis(BaseModel):
    """Why predictions and outcomes differ, and what the KB should believe instead."""

    analysis: str = Field(max_length=5000, description="The reasoning, citing profile numbers")
    wrong_assumptions: list[Item] = Field(default_factory=list, max_length=10,
                                          description="Beliefs the evidence contradicts")
    lessons: list[Item] = Field(default_factory=list, max_length=10,
                                description="What the KB should learn, one per item")


def perf_gap_analysis(state: OptimizationState, runtime: Runtime[RunContext], *,
                      resources: RunResources) -> RunUpdate:
    evaluation = learning_note(state, "policy_evaluation")
    if evaluation is None or evaluation.path is None:
        return {"learning": [skipped_note(state.iteration, NODE, "no policy evaluation to analyse")]}
    question = load_prompt(NODE).question(
        role="perf_gap_analysis", node=NODE, key=f"i{state.iteration}.{NODE}", schema=GapAnalysis,
        evaluation=resources.files.read(evaluation.path), evidence=render_evidence(resources, iteration_steps(state)),
        limits=answer_limits(GapAnalysis),
    )
    return ask_learning_role(resources, runtime, state.iteration, NODE, question,
                             summary_of=lambda value: value.analysis)
