"""`lower`: the lowering agent writes the CUDA that applies one of the sampled optimizations.

It is shown the problem, the generated header, the current code, its profile, its state with the KB slice
of the sampled optimizations, and, on a retry, the failed attempt with the compiler's or the verifier's
message. No usable answer ends the step as failed (`ending`), and the trajectory goes on. Without memory
and in the minimal agent (ablations) it is offered nothing: it picks an optimization itself, shown no KB.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from kernelblaster.graph.agents import AgentFailed, Question
from kernelblaster.graph.context import RunContext
from kernelblaster.graph.progress import trajectory_note, write_note
from kernelblaster.graph.services import RunResources
from kernelblaster.graph.state import ProfiledState, StepEnding, TrajectoryState
from kernelblaster.kb.prompt_slice import render_prompt_slice
from kernelblaster.nodes.kernels import CudaAnswer, check_cuda, feedback_section, save_candidate
from kernelblaster.nodes.profile_view import profile_view
from kernelblaster.nodes.prompting import load_prompt

NODE = "lower"


def lower(state: TrajectoryState, runtime: Runtime[RunContext], *, resources: RunResources) -> dict[str, object]:
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
    with resources.knowledge_base() as kb:
        kb_state = kb.document.resolve_state(state.matched.state_id)
        kb_slice = render_prompt_slice(kb_state, state.this_step.choices, context.kb_slice_tokens) if kb_state else ""
    return load_prompt(NODE).question(
        role="lowering", node=NODE, key=f"{state.next_attempt_label}.{NODE}", schema=CudaAnswer,
        check=lambda answer: _problem_with(answer, offered), **_kernel_fields(state, resources),
        state=_describe_state(state.profiled), kb_slice=kb_slice, offered=", ".join(offered),
    )


def _unguided_question(state: TrajectoryState, resources: RunResources) -> Question[CudaAnswer]:
    """The lowering prompt without memory: the kernel, its profile and (unless the minimal agent) its state."""
    described = f"\n## Its performance state\n{_describe_state(state.profiled)}\n" if state.profiled else ""
    return load_prompt(f"{NODE}_unguided").question(
        role="lowering", node=NODE, key=f"{state.next_attempt_label}.{NODE}", schema=CudaAnswer, check=check_cuda,
        **_kernel_fields(state, resources), state=described,
    )


def _kernel_fields(state: TrajectoryState, resources: RunResources) -> dict[str, str]:
    """What every lowering prompt shows: the model, the header, the current kernel, its profile, the rules."""
    context = resources.context
    return {
        "pytorch_source": resources.problem.source, "header": resources.header,
        "current_source": resources.files.read(state.current.source), "current_time": _timing(state),
        "profile": profile_view(resources, state.current).findings,
        "allowed_libraries": ", ".join(context.allow) or "none", "precision": context.precision,
        "feedback": feedback_section(resources.files, state.this_step.feedback),
    }


def _describe_state(profiled: ProfiledState) -> str:
    return f"{profiled.name}: {profiled.primary_bottleneck}. {profiled.description}"


def _problem_with(answer: CudaAnswer, offered: list[str]) -> str | None:
    if answer.technique is not None and answer.technique not in offered:
        return f"technique must be one of the offered optimizations: {', '.join(offered)}"
    return check_cuda(answer)


def _timing(state: TrajectoryState) -> str:
    speedup = f", {state.current.speedup:.2f}x vs PyTorch" if state.current.speedup is not None else ""
    return f"{state.current.time_ms:.4f} ms per call{speedup}"
