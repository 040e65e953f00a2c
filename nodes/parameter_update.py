"""`parameter_update`: the last stage of the textual gradient — turn the iteration's gap analysis (with each
step's evidence beside it) into KB edits, applied through the KB's validated edit schema, then snapshot the
KB for the iteration.

The edits and what became of each are kept in the run directory. A resumed run that reaches this node
again finds them there and does not apply them twice (and the journal replays the same answer).
"""

from __future__ import annotations

from typing import Annotated

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import ProgressNote, write_note
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import LearningNote, LearningStage, OptimizationState, RunUpdate
from kernelblaster.graph.llm.agents import AgentFailed, Question
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.kb.edits import (
    AddLesson,
    AddOptimization,
    Deprecate,
    EditResult,
    MergeStates,
    SetDescription,
    SetPrior,
)
from kernelblaster.kb.journal import ChangeId
from kernelblaster.kb.operations import OperationKind
from kernelblaster.kb.prompt_slice import describe_evidence
from kernelblaster.kb.schema import KBDocument
from kernelblaster.nodes.learning import iteration_steps, learning_note, skipped_note
from kernelblaster.nodes.prompting import answer_limits, load_prompt
from kernelblaster.nodes.step_evidence import render_evidence

NODE: LearningStage = "parameter_update"

# New states come from match_state, with a measured signature; the learning step edits what exists.
LearningEdit = Annotated[
    AddOptimization | SetPrior | SetDescription | AddLesson | Deprecate | MergeStates, Field(discriminator="kind")
]


class KBUpdate(BaseModel):
    """The edits the analysis supports (possibly none), and why."""

    edits: list[LearningEdit] = Field(default_factory=list, max_length=12)
    rationale: str = Field(max_length=2000)


class AppliedUpdate(BaseModel):
    update: KBUpdate
    results: list[EditResult]
    proposed: KBUpdate | None = Field(default=None, description="The model's answer, where it differs from the "
                                                                "update applied (`_offered_for_this_problem`)")


def parameter_update(state: OptimizationState, runtime: Runtime[RunContext], *,
                     resources: RunResources) -> RunUpdate:
    analysis = learning_note(state, "perf_gap_analysis")
    usage: list[TokenUsage]
    if analysis is None or analysis.path is None:
        note, usage = skipped_note(state.iteration, NODE, "no gap analysis to learn from"), []
    else:
        note, usage = _update(state, resources, analysis.path)
    with resources.knowledge_base() as kb:
        kb.write_snapshot(state.run_id, state.iteration)
    write_note(runtime, ProgressNote(node=NODE, iteration=state.iteration, text=note.summary[:160]))
    return {"learning": [note], "token_usage": usage}


def _update(state: OptimizationState, resources: RunResources,
            analysis_path: str) -> tuple[LearningNote, list[TokenUsage]]:
    files = resources.files
    path = files.learning_path(state.iteration, NODE)
    if files.path(path).exists():
        applied = AppliedUpdate.model_validate_json(files.read(path))
        return _note(state.iteration, applied, path), []
    try:
        answer = resources.ask(_question(state, resources, analysis_path))
    except AgentFailed as failure:
        return skipped_note(state.iteration, NODE, str(failure)), [failure.usage]
    update = _offered_for_this_problem(answer.value, state.facts.operations if state.facts is not None else None)
    results = resources.apply_edits(ChangeId(run_id=state.run_id, iteration=state.iteration, kind="learning"),
                                    update.edits)
    applied = AppliedUpdate(update=update, results=results, proposed=answer.value if update != answer.value else None)
    files.save(path, applied)
    return _note(state.iteration, applied, path), [answer.usage]


def _offered_for_this_problem(update: KBUpdate, operations: list[OperationKind] | None) -> KBUpdate:
    """The update, with each new technique's operation kinds widened to include this problem's, where the
    model named none of them: learned here, a technique must not become one this problem is never offered."""
    edits = [edit.offered_for(operations) if isinstance(edit, AddOptimization) else edit for edit in update.edits]
    return update.model_copy(update={"edits": edits})


def _question(state: OptimizationState, resources: RunResources, analysis_path: str) -> Question[KBUpdate]:
    state_ids = sorted({step.state_id for step in iteration_steps(state) if step.state_id})
    with resources.knowledge_base() as kb:
        document = kb.document
        states = "\n\n".join(describe_kb_state(document, state_id) for state_id in state_ids)
        catalogue = ", ".join(sorted(document.techniques))
    return load_prompt(NODE).question(
        role="parameter_update", node=NODE, key=f"i{state.iteration}.{NODE}", schema=KBUpdate,
        iteration=state.iteration + 1, analysis=resources.files.read(analysis_path), states=states,
        catalogue=catalogue, evidence=render_evidence(resources, iteration_steps(state)),
        limits=answer_limits(KBUpdate),
    )


def describe_kb_state(document: KBDocument, state_id: str) -> str:
    state = document.resolve_state(state_id)
    if state is None:
        return f"{state_id}: no longer in the KB"
    lines = [f"{state.id} ({state.name}): primary {state.primary_bottleneck}; {state.description}"]
    for optimization in state.optimizations:
        retired = f" [deprecated: {optimization.deprecated}]" if optimization.deprecated else ""
        lines.append(f"- {optimization.technique}: prior {optimization.prior_speedup:.2f}x, "
                     f"{describe_evidence(optimization.stats)}{retired}")
        lines += [f"    lesson: {lesson}" for lesson in optimization.lessons]
    return "\n".join(lines)


def _note(iteration: int, applied: AppliedUpdate, path: str) -> LearningNote:
    done = sum(result.applied for result in applied.results)
    rejected = [f"{r.kind}: {r.reason}" for r in applied.results if not r.applied]
    kept = [r.reason for r in applied.results if r.applied and r.reason]
    summary = (f"{done} of {len(applied.results)} edits applied"
               + (f"; rejected {'; '.join(rejected)}" if rejected else "")
               + (f"; {'; '.join(kept)}" if kept else ""))
    return LearningNote(iteration=iteration, stage=NODE, summary=summary[:500], path=path)
