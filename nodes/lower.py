"""`lower`: the lowering agent writes the CUDA that applies one of the sampled optimizations.

It is shown the problem, the generated header, the GPU, the precision contract and the targets (the facts
gathered in `setup`), the current code with its time and profile, the trajectory's earlier steps, its state
with the KB slice of the sampled optimizations, and, on a retry, the failed attempt with the compiler's or
the verifier's message. It chooses among the offered optimizations and says why; the reason is kept with
the candidate and recorded with the step's outcome. No usable answer ends the step as failed (`ending`),
and the trajectory goes on. Without memory and in the minimal agent (ablations) it is offered nothing: it
picks an optimization itself, shown no KB.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import trajectory_note, write_note
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import MatchedState, ProfiledState, StepEnding, TrajectoryState, TrajectoryUpdate
from kernelblaster.graph.llm.agents import AgentFailed, Question
from kernelblaster.kb.index import StateMatch
from kernelblaster.kb.prompt_slice import render_prompt_slice
from kernelblaster.kb.schema import PerformanceState
from kernelblaster.nodes.briefing import (
    gpu_section,
    history_section,
    kernel_time,
    precision_section,
    targets_section,
)
from kernelblaster.nodes.kernels import CudaAnswer, check_cuda, feedback_section, read_result, save_candidate
from kernelblaster.nodes.profile_view import profile_view
from kernelblaster.nodes.prompting import load_prompt

NODE = "lower"


def lower(state: TrajectoryState, runtime: Runtime[RunContext], *, resources: RunResources) -> TrajectoryUpdate:
    step = state.this_step
    offered = [choice.technique for choice in step.choices]
    question = _question(state, resources, offered) if runtime.context.uses_kb else _unguided_question(state, resources)
    try:
        answer = resources.ask(question)
    except AgentFailed as failure:
        write_note(runtime, trajectory_note(NODE, state, f"no code: {failure}"))
        ending = StepEnding(outcome="llm_failed", detail=str(failure))
        return {"this_step": step.replace(ending=ending, attempts=step.attempts + 1), "token_usage": [failure.usage]}
    # A hand-written answer may leave the technique out; it then applies the first one offered.
    applied = answer.value.model_copy(update={"technique": answer.value.technique or next(iter(offered), None)})
    candidate = save_candidate(resources.files, applied, state.next_attempt_label)
    write_note(runtime, trajectory_note(NODE, state, f"{candidate.technique} -> {candidate.source}"))
    return {"this_step": step.replace(candidate=candidate, attempts=step.attempts + 1), "token_usage": [answer.usage]}


def _question(state: TrajectoryState, resources: RunResources, offered: list[str]) -> Question[CudaAnswer]:
    context = resources.context
    assert state.profiled is not None and state.matched is not None, "the state is extracted and matched first"
    arch = read_result(resources.files, state.current.result).arch
    with resources.knowledge_base() as kb:
        kb_state = kb.document.resolve_state(state.matched.state_id)
        kb_slice = render_prompt_slice(kb_state, state.this_step.choices, context.kb_slice_tokens,
                                       match=_match(state.matched, kb_state, arch)) if kb_state else ""
    return load_prompt(NODE).question(
        role="lowering", node=NODE, key=f"{state.next_attempt_label}.{NODE}", schema=CudaAnswer,
        check=lambda answer: _problem_with(answer, offered), **_kernel_fields(state, resources),
        state=_describe_state(state.profiled), kb_slice=kb_slice, offered=", ".join(offered),
    )


def _match(matched: MatchedState, kb_state: PerformanceState, arch: str) -> StateMatch | None:
    """How near the kernel's signature was to the state, for the slice's "matched at distance" line (None for
    a state discovered for this kernel, or a kernel without a signature)."""
    if matched.distance is None:
        return None
    return StateMatch(state=kb_state, distance=matched.distance, same_arch=arch in kb_state.arches)


def _unguided_question(state: TrajectoryState, resources: RunResources) -> Question[CudaAnswer]:
    """The lowering prompt without memory: the kernel, its profile and (unless the minimal agent) its state."""
    described = f"\n## Its performance state\n{_describe_state(state.profiled)}\n" if state.profiled else ""
    return load_prompt(f"{NODE}_unguided").question(
        role="lowering", node=NODE, key=f"{state.next_attempt_label}.{NODE}", schema=CudaAnswer, check=check_cuda,
        **_kernel_fields(state, resources), state=described,
    )


def _kernel_fields(state: TrajectoryState, resources: RunResources) -> dict[str, str]:
    """What every lowering prompt shows: the model, the header, the GPU, the precision contract, the targets,
    the current kernel and its profile, the trajectory's earlier steps, and the last failure."""
    context = resources.context
    return {
        "pytorch_source": resources.problem.source, "header": resources.header, "gpu": gpu_section(state.facts),
        "precision": precision_section(context.precision, context.seeds, state.facts),
        "allowed_libraries": ", ".join(context.allow) or "none",
        "targets": targets_section(state.facts, state.initial),
        "current_source": resources.files.read(state.current.source),
        "current_time": kernel_time(state.current, state.facts, state.initial),
        "profile": profile_view(resources, state.current).findings, "history": history_section(state.steps),
        "feedback": feedback_section(resources.files, state.this_step.feedback),
    }


def _describe_state(profiled: ProfiledState) -> str:
    return f"{profiled.name}: {profiled.primary_bottleneck}. {profiled.description}"


def _problem_with(answer: CudaAnswer, offered: list[str]) -> str | None:
    if answer.technique is not None and answer.technique not in offered:
        return f"technique must be one of the offered optimizations: {', '.join(offered)}"
    return check_cuda(answer)
