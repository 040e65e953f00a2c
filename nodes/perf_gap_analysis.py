"""`perf_gap_analysis`: the second half of the textual gradient — why the outcomes of the iteration
differ from the KB's predictions, reasoned from the policy evaluation and the kernels' profiles.
"""

from __future__ import annotations

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from kernelblaster.graph.context import RunContext
from kernelblaster.graph.services import RunResources
from kernelblaster.graph.state import KernelRef, LearningStage, OptimizationState
from kernelblaster.nodes.learning import ask_learning_role, iteration_steps, learning_note, skipped_note
from kernelblaster.nodes.profile_view import profile_view
from kernelblaster.nodes.prompting import load_prompt

NODE: LearningStage = "perf_gap_analysis"
MAX_PROFILED_KERNELS = 8


class GapAnalysis(BaseModel):
    """Why predictions and outcomes differ, and what the KB should believe instead."""

    analysis: str = Field(description="The reasoning, citing profile numbers")
    wrong_assumptions: list[str] = Field(default_factory=list, description="Beliefs the evidence contradicts")
    lessons: list[str] = Field(default_factory=list, description="What the KB should learn, one per item")


def perf_gap_analysis(state: OptimizationState, runtime: Runtime[RunContext], *,
                      resources: RunResources) -> dict[str, object]:
    evaluation = learning_note(state, "policy_evaluation")
    if evaluation is None or evaluation.path is None:
        return {"learning": [skipped_note(state.iteration, NODE, "no policy evaluation to analyse")]}
    question = load_prompt(NODE).question(
        role="perf_gap_analysis", node=NODE, key=f"i{state.iteration}.{NODE}", schema=GapAnalysis,
        evaluation=resources.files.read(evaluation.path), profiles=_profiles(state, resources),
    )
    return ask_learning_role(resources, runtime, state.iteration, NODE, question,
                             summary_of=lambda value: value.analysis)


def _profiles(state: OptimizationState, resources: RunResources) -> str:
    kernels: dict[str, KernelRef] = {}
    for step in iteration_steps(state):
        for kernel in (step.before, step.after):
            if kernel is not None:
                kernels.setdefault(kernel.sha256, kernel)
    lines = [f"- {k.label} ({k.technique or 'initial'}, {k.time_ms:.4f} ms): {profile_view(resources, k).summary}"
             for k in list(kernels.values())[:MAX_PROFILED_KERNELS]]
    return "\n".join(lines) or "(no profiles)"
