"""`match_state`: find the KB state of the current kernel — a known one, or a newly discovered one.

The nearest states by signature come from the KB's Chroma index. One that is nearly identical is taken
as it is; otherwise the state matcher compares the kernel's state with the nearest ones (primary and
secondary bottlenecks) and either picks one or names a new state with the optimizations worth trying
there, which is added to the KB. Without an answer, the nearest state stands; so it does for a new state
when the run writes no KB (memory frozen).
"""

from __future__ import annotations

from collections.abc import Collection

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field, ValidationError

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import trajectory_note, write_note
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import MatchedState, ProfiledState, TrajectoryState, TrajectoryUpdate
from kernelblaster.graph.llm.agents import AgentFailed
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.kb.edits import AddOptimization, AddState, KBEdit, apply_edits
from kernelblaster.kb.index import StateMatch
from kernelblaster.kb.journal import ChangeId
from kernelblaster.kb.schema import Category, KBDocument, LongText, Optimization, PerformanceState, PriorSpeedup, Slug
from kernelblaster.nodes.kernels import read_result
from kernelblaster.nodes.prompting import load_prompt

NODE = "match_state"
# Signatures this close (cosine distance) are the same state without asking: profiler noise is larger.
CLEARLY_KNOWN_DISTANCE = 0.02
NEAREST_STATES = 4


class ProposedOptimization(BaseModel):
    technique: Slug = Field(description="A catalogue technique, or a new one (then give category and description)")
    prior_speedup: PriorSpeedup = Field(description="Expected speedup before any evidence (1.0 = no change)")
    category: Category | None = None
    description: LongText | None = None


class NewState(BaseModel):
    id: Slug = Field(description="A new state id: lowercase letters, digits and _")
    optimizations: list[ProposedOptimization] = Field(min_length=1, max_length=12)


class MatchDecision(BaseModel):
    """The state matcher's decision: a known state's id, or a new state."""

    state_id: str | None = Field(description="The id of the matching known state, or null if none matches")
    reason: str = Field(description="Why, in a sentence")
    new_state: NewState | None = Field(default=None, description="The new state, when state_id is null")


def match_state(state: TrajectoryState, runtime: Runtime[RunContext], *, resources: RunResources) -> TrajectoryUpdate:
    profiled = state.profiled
    assert profiled is not None, "extract_state runs first"
    if state.matched is not None and state.matched.kernel_sha256 == profiled.kernel_sha256:
        return {}
    arch = read_result(resources.files, state.current.result).arch
    with resources.knowledge_base() as kb:
        nearest = (kb.nearest_states(profiled.signature, arch, NEAREST_STATES) if profiled.signature
                   else [StateMatch(s, 1.0, arch in s.arches) for s in _live_states(kb.document)])
    matched: MatchedState | None
    usage: list[TokenUsage]
    if nearest and profiled.signature and nearest[0].distance <= CLEARLY_KNOWN_DISTANCE:
        matched, usage = _known(profiled, nearest[0]), []
    else:
        matched, usage = _ask_matcher(resources, state, profiled, nearest, arch)
    if matched is not None:
        how = "discovered" if matched.discovered else "matched"
        write_note(runtime, trajectory_note(NODE, state, f"{how} state {matched.state_id}"))
    return {"matched": matched, "token_usage": usage}


def _ask_matcher(resources: RunResources, state: TrajectoryState, profiled: ProfiledState, nearest: list[StateMatch],
                 arch: str) -> tuple[MatchedState | None, list[TokenUsage]]:
    with resources.knowledge_base() as kb:
        document = kb.document.model_copy(deep=True)
    question = load_prompt(NODE).question(
        role="state_matcher", node=NODE, key=f"{state.step_label}.{NODE}", schema=MatchDecision,
        check=lambda decision: _problem_with(decision, nearest, profiled, arch, document),
        state=_describe(profiled), candidates=_describe_candidates(nearest, profiled),
        catalogue=_describe_catalogue(document),
    )
    try:
        answer = resources.ask(question)
    except AgentFailed as failure:
        return (_known(profiled, nearest[0]) if nearest else None), [failure.usage]
    decision = answer.value
    if decision.state_id is not None:
        chosen = next(m for m in nearest if m.state.id == decision.state_id)
        return _known(profiled, chosen), [answer.usage]
    assert decision.new_state is not None, "checked by _problem_with"
    if not resources.context.writes_kb:
        return (_known(profiled, nearest[0]) if nearest else None), [answer.usage]
    # A replayed answer (resumed run) finds its state already added; the rejection changes nothing.
    resources.apply_edits(ChangeId(run_id=state.run_id, iteration=state.iteration, trajectory=state.trajectory,
                                   step=state.step, kind="discovery"),
                          discovery_edits(decision.new_state, profiled, arch, document.techniques))
    return MatchedState(kernel_sha256=profiled.kernel_sha256, state_id=decision.new_state.id, name=profiled.name,
                        distance=None, discovered=True), [answer.usage]


def _problem_with(decision: MatchDecision, nearest: list[StateMatch], profiled: ProfiledState, arch: str,
                  document: KBDocument) -> str | None:
    if decision.state_id is not None:
        offered = [m.state.id for m in nearest]
        return None if decision.state_id in offered else f"state_id must be one of {', '.join(offered)} or null"
    if decision.new_state is None:
        return "give new_state when state_id is null"
    if profiled.signature is None:
        return "without a profile signature no new state can be indexed: choose one of the known states"
    try:
        edits = discovery_edits(decision.new_state, profiled, arch, document.techniques)
    except ValidationError as error:
        return f"the new state is not valid: {error}"
    rejected = [r.reason for r in apply_edits(document.model_copy(deep=True), edits) if not r.applied]
    return "; ".join(rejected) or None


def discovery_edits(new: NewState, profiled: ProfiledState, arch: str, catalogue: Collection[str]) -> list[KBEdit]:
    """The KB edits that add a discovered state: the state with catalogue techniques, then new techniques."""
    return [
        AddState(state=PerformanceState(
            id=new.id, name=profiled.name, primary_bottleneck=profiled.primary_bottleneck,
            secondary=profiled.secondary, description=profiled.description, signature=profiled.signature or [],
            arches=[arch], optimizations=[Optimization(technique=o.technique, prior_speedup=o.prior_speedup)
                                          for o in new.optimizations if o.technique in catalogue],
        )),
        *[AddOptimization(state_id=new.id, technique=o.technique, prior_speedup=o.prior_speedup,
                          category=o.category, description=o.description)
          for o in new.optimizations if o.technique not in catalogue],
    ]


def _known(profiled: ProfiledState, match: StateMatch) -> MatchedState:
    return MatchedState(kernel_sha256=profiled.kernel_sha256, state_id=match.state.id, name=match.state.name,
                        distance=match.distance if profiled.signature else None, discovered=False)


def _live_states(document: KBDocument) -> list[PerformanceState]:
    return [s for s in document.states.values() if s.deprecated is None]


def _describe(profiled: ProfiledState) -> str:
    secondary = "; ".join(profiled.secondary) or "none"
    return (f"{profiled.name}. Primary bottleneck: {profiled.primary_bottleneck}. Secondary: {secondary}.\n"
            f"{profiled.description}\nProfile: {profiled.signature_summary}")


def _describe_candidates(nearest: list[StateMatch], profiled: ProfiledState) -> str:
    lines = []
    for match in nearest:
        state = match.state
        distance = f"distance {match.distance:.3f}" if profiled.signature else "no signature to compare"
        elsewhere = "" if match.same_arch else ", seen on other GPUs only"
        lines.append(f"- {state.id} ({state.name}; {distance}{elsewhere}): primary: {state.primary_bottleneck}; "
                     f"secondary: {', '.join(state.secondary) or 'none'}")
    return "\n".join(lines) or "(the knowledge base has no states yet)"


def _describe_catalogue(document: KBDocument) -> str:
    return ", ".join(f"{name} ({technique.category})" for name, technique in sorted(document.techniques.items()))
