"""`extract_state`: the performance state of the trajectory's current kernel, from its profile.

The numeric signature (what the KB indexes) is always computed from the profile; the state extractor
adds the words: a name, the primary bottleneck, secondary characteristics, a description. If the agent
cannot answer, the signature's own one-line reading stands in. A kernel already read keeps its state.
"""

from __future__ import annotations

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from kernelblaster.graph.agents import AgentFailed
from kernelblaster.graph.context import RunContext
from kernelblaster.graph.progress import trajectory_note, write_note
from kernelblaster.graph.services import RunResources, Services
from kernelblaster.graph.state import KernelRef, ProfiledState, TokenUsage, TrajectoryState
from kernelblaster.harness.profile import ProfileReport
from kernelblaster.kb.schema import LongText, ShortText
from kernelblaster.nodes.kernels import read_result
from kernelblaster.nodes.prompting import load_prompt

NODE = "extract_state"


class StateReading(BaseModel):
    """The state extractor's reading of a profile."""

    name: ShortText = Field(description="The state in a few words, e.g. 'DRAM-bandwidth bound streaming'")
    primary_bottleneck: ShortText = Field(description="What bounds the time, in one short phrase")
    secondary: list[ShortText] = Field(default_factory=list, max_length=4,
                                       description="Other characteristics an engineer would act on")
    description: LongText = Field(description="Two to four sentences citing the profile's numbers")


class ProfileView(BaseModel):
    """What the profile of a kernel says, in the forms the prompts and the KB need."""

    signature: list[float] | None
    summary: str
    findings: str


def profile_view(resources: RunResources, kernel: KernelRef) -> ProfileView:
    result = read_result(resources.files, kernel.result)
    profile = result.profile
    if isinstance(profile, ProfileReport):
        signature = profile.signature if any(profile.signature) else None
        return ProfileView(signature=signature, summary=profile.signature_summary, findings=profile.findings)
    why = profile.reason if profile is not None else "profiling was off"
    summary = f"no profile ({why}); {kernel.time_ms:.4f} ms per call"
    return ProfileView(signature=None, summary=summary, findings=summary)


def extract_state(state: TrajectoryState, runtime: Runtime[RunContext], *, services: Services) -> dict[str, object]:
    if state.profiled is not None and state.profiled.kernel_sha256 == state.current.sha256:
        return {}
    resources = services.for_run(runtime.context, state.problem_path, state.run_dir)
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
        answer = resources.agent("state_extractor").ask(question)
    except AgentFailed as failure:
        return reading_from_summary(view.summary), failure.usage
    return answer.value, answer.usage


def reading_from_summary(summary: str) -> StateReading:
    """The signature's own reading ("memory-bound: DRAM 91%, ..."), when the agent gave none."""
    headline = summary.split(":", 1)[0].strip()[:160] or "unclassified"
    return StateReading(name=headline, primary_bottleneck=headline, description=summary[:700].ljust(10, "."))
