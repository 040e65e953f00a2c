"""Deterministic learning from measurements: one outcome event updates one optimization and one transition.

Each event carries an id (run, iteration, trajectory, step) that the KB remembers, for every run it has
ever learned from, as one bit in a per-run table of step bitmasks: replaying an event (a resumed run,
however old) changes nothing, in whatever order events arrive. Suspicious outcomes count as attempts but
never as rewards.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from kernelblaster.kb.errors import KBLookupError
from kernelblaster.kb.schema import KBDocument, KBModel, Optimization, OutcomeStatus, RunId, Slug, Transition

# Far above what a run's context allows; the bounds keep one stray id from growing a run's step table.
MAX_ITERATIONS = 1000
MAX_TRAJECTORIES = 256
MAX_STEPS = 256
ChoiceReason = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=400)]


class EventId(KBModel):
    """Which rollout step produced an outcome: unique within a run."""

    model_config = KBModel.model_config | {"frozen": True}

    run_id: RunId
    iteration: int = Field(ge=0, lt=MAX_ITERATIONS)
    trajectory: int = Field(ge=0, lt=MAX_TRAJECTORIES)
    step: int = Field(ge=0, lt=MAX_STEPS)

    @property
    def step_key(self) -> str:
        return f"{self.iteration}.{self.trajectory}.{self.step}"


class OutcomeChoice(KBModel):
    """How the technique of an outcome was chosen: the optimizations offered, and the lowering agent's reason
    for taking this one (None when it gave none)."""

    offered: list[Slug] = Field(min_length=1)
    reason: ChoiceReason | None = None


class OutcomeEvent(KBModel):
    """The result of trying `technique` on a kernel in state `state_id`.

    `speedup` is the kernel's time before the step divided by its time after (above 1 is faster); it is
    given exactly when the status is `measured`. `previous_technique` is the step before this one in the
    same trajectory, if any, so phase orderings are learned. `choice` is the evidence of how the technique
    was picked; it is journaled with the outcome (`kb.journal`) and changes no statistic.
    """

    event_id: EventId
    state_id: str
    technique: str
    status: OutcomeStatus
    speedup: float | None = Field(default=None, gt=0)
    previous_technique: Slug | None = None
    choice: OutcomeChoice | None = None

    @model_validator(mode="after")
    def _speedup_iff_measured(self) -> OutcomeEvent:
        if (self.speedup is not None) != (self.status is OutcomeStatus.MEASURED):
            raise ValueError("speedup is given exactly when status is 'measured'")
        return self


def apply_outcome(document: KBDocument, event: OutcomeEvent, when: datetime) -> bool:
    """Fold `event` into `document`; False (and no change) if this event id was applied before."""
    if was_applied(document, event.event_id):
        return False
    optimization = _optimization_for(document, event)
    optimization.stats = optimization.stats.with_outcome(event.status, event.speedup, when)
    if event.previous_technique:
        transition = _transition_for(document, event.previous_technique, event.technique)
        transition.stats = transition.stats.with_outcome(event.status, event.speedup, when)
    _remember(document, event.event_id)
    return True


def _optimization_for(document: KBDocument, event: OutcomeEvent) -> Optimization:
    state = document.resolve_state(event.state_id)
    if state is None:
        raise KBLookupError(
            f"outcome {event.event_id.step_key} of run {event.event_id.run_id}: no state {event.state_id!r} in the KB"
        )
    optimization = state.optimization(event.technique)
    if optimization is None:
        raise KBLookupError(
            f"outcome {event.event_id.step_key} of run {event.event_id.run_id}: "
            f"state {state.id} has no technique {event.technique!r}"
        )
    return optimization


def _transition_for(document: KBDocument, before: str, after: str) -> Transition:
    transition = document.transition(before, after)
    if transition is None:
        transition = Transition(before=before, after=after)
        document.transitions.append(transition)
    return transition


def was_applied(document: KBDocument, event_id: EventId) -> bool:
    """Whether the outcome with this id is already part of `document`'s statistics."""
    iterations = document.applied_steps.get(event_id.run_id, [])
    if event_id.iteration >= len(iterations) or event_id.trajectory >= len(iterations[event_id.iteration]):
        return False
    return bool(iterations[event_id.iteration][event_id.trajectory] >> event_id.step & 1)


def _remember(document: KBDocument, event_id: EventId) -> None:
    steps = document.applied_steps.setdefault(event_id.run_id, [])
    mark_applied(steps, event_id.iteration, event_id.trajectory, event_id.step)


def mark_applied(steps: list[list[int]], iteration: int, trajectory: int, step: int) -> None:
    """Set the bit of `step` in a run's `[iteration][trajectory]` table of step bitmasks, growing it as needed."""
    steps.extend([] for _ in range(iteration + 1 - len(steps)))
    masks = steps[iteration]
    masks.extend(0 for _ in range(trajectory + 1 - len(masks)))
    masks[trajectory] |= 1 << step
