"""`extract_state`: the performance state of the trajectory's current kernel, from its profile.

The numeric signature (what the KB indexes) is always computed from the profile; the state extractor
adds the words: a name, the primary bottleneck, secondary characteristics, a description. If the agent
cannot answer, the signature's own one-line reading stands in. A kernel already read keeps its state.
With cycles-only profile feedback (an ablation) the profile is reduced to its elapsed cycles: no signature.
"""

from __future__ import annotations

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import trajectory_note, write_note
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import ProfiledState, TrajectoryState, TrajectoryUpdate
from kernelblaster.graph.llm.agents import AgentFailed
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.kb.schema import LongText, ShortText
from kernelblaster.nodes.profile_view import ProfileView, profile_view
from kernelblaster.nodes.prompting import load_prompt

NODE = "extract_state"


class StateReading(BaseModel):
    """The state extractor's reading of a profile."""

    name: ShortText = Field(description="The state in a few words, e.g. 'DRAM-bandwidth bound streaming'")
    primary_bottleneck: ShortText = Field(description="What bounds the time, in one short phrase")
    secondary: list[ShortText] = Field(default_factory=list, max_length=4,
                                       description="Other characteristics an engineer would act on")
    description: LongText = Field(description="Two to four sentences citing the profile's numbers")


def extract_state(state: TrajectoryState, runtime: Runtime[RunContext], *,
                  resources: RunResources) -> TrajectoryUpdate:
    if state.profiled is not None and state.profiled.kernel_sha256 == state.current.sha256:
        return {}
    view = profile_view(resources, state.current)
    reading, usage = _read(resources, state, view)
    profiled = ProfiledState(kernel_sha256=state.current.sha256, signature=view.signature,
                             signature_summary=view.summary, **reading.model_dump())
    write_note(runtime, trajectory_note(NODE, state, f"{profiled.name}: {profiled.primary_bottleneck}"))
    return {"profiled": profiled, "token_usage": [usage]}


def _read(resources: RunResources, state: TrajectoryState, view: ProfileView) -> tuple[StateReading, TokenUsage]:
    question = load_prompt(NODE).question(
        role="state_extractor", node=NODE, key=f"{state.step_label}.{NODE}", schema=StateReading,
        signature_summary=view.summary, findings=view.findings,
        cuda_source=resources.files.read(state.current.source),
    )
    try:
        answer = resources.ask(question)
    except AgentFailed as failure:
        return reading_from_summary(view.summary), failure.usage
    return answer.value, answer.usage


def reading_from_summary(summary: str) -> StateReading:
    """The signature's own reading ("memory-bound: DRAM 91%, ..."), when the agent gave none."""
    headline = summary.split(":", 1)[0].strip()[:160] or "unclassified"
    return StateReading(name=headline, primary_bottleneck=headline, description=summary[:700].ljust(10, "."))
