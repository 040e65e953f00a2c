"""Deterministic learning from measurements: one outcome event updates one optimization and one transition.

Each event carries an id (run, iteration, trajectory, step) that the KB remembers, so replaying an event
(a resumed run) changes nothing. Suspicious outcomes count as attempts but never as rewards.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from kernelblaster.kb.errors import KBLookupError
from kernelblaster.kb.schema import KBDocument, KBModel, Optimization, OutcomeStatus, Slug, Transition

# Event ids are remembered for the most recent runs only (a level of problems would otherwise fill the
# file with ids); only a recent run can be resumed.
REMEMBERED_RUNS = 16
# Technique pairs grow quadratically with the catalogue; past this many, the pair with the least evidence
# makes room, so phase-ordering knowledge stays a small part of the file.
MAX_TRANSITIONS = 128

# Run ids name snapshot folders, so they are restricted to characters safe in a file name.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
RunId = Annotated[str, StringConstraints(pattern=RUN_ID_PATTERN)]


class EventId(KBModel):
    """Which rollout step produced an outcome: unique within a run."""

    model_config = KBModel.model_config | {"frozen": True}

    run_id: RunId
    iteration: int = Field(ge=0)
    trajectory: int = Field(ge=0)
    step: int = Field(ge=0)

    @property
    def step_key(self) -> str:
        return f"{self.iteration}.{self.trajectory}.{self.step}"


class OutcomeEvent(KBModel):
    """The result of trying `technique` on a kernel in state `state_id`.

    `speedup` is the kernel's time before the step divided by its time after (above 1 is faster); it is
    given exactly when the status is `measured`. `previous_technique` is the step before this one in the
    same trajectory, if any, so phase orderings are learned.
    """

    event_id: EventId
    state_id: str
    technique: str
    status: OutcomeStatus
    speedup: float | None = Field(default=None, gt=0)
    previous_technique: Slug | None = None

    @model_validator(mode="after")
    def _speedup_iff_measured(self) -> OutcomeEvent:
        if (self.speedup is not None) != (self.status is OutcomeStatus.MEASURED):
            raise ValueError("speedup is given exactly when status is 'measured'")
        return self


def apply_outcome(document: KBDocument, event: OutcomeEvent, when: datetime) -> bool:
    """Fold `event` into `document`; False (and no change) if this event id was applied before."""
    applied = document.applied_events.get(event.event_id.run_id, [])
    if event.event_id.step_key in applied:
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
        if len(document.transitions) >= MAX_TRANSITIONS:
            document.transitions.remove(min(document.transitions, key=_evidence))
        transition = Transition(before=before, after=after)
        document.transitions.append(transition)
    return transition


def _evidence(transition: Transition) -> tuple[int, int, datetime]:
    stats = transition.stats
    return (stats.measured, stats.attempts, stats.updated_at or datetime.min.replace(tzinfo=UTC))


def _remember(document: KBDocument, event_id: EventId) -> None:
    runs = document.applied_events
    # Re-inserting moves the run to the end, so the oldest-used runs are the ones forgotten.
    runs[event_id.run_id] = [*runs.pop(event_id.run_id, []), event_id.step_key]
    for stale_run in list(runs)[:-REMEMBERED_RUNS]:
        del runs[stale_run]
