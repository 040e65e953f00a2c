"""`record_step`: put the step in the replay buffer, teach the KB its outcome, and move the trajectory on.

The KB learns deterministically from every attempt that reached the harness (failures are evidence too),
under the event id (run, iteration, trajectory, step): a resumed run that records the step again changes
nothing. A suspicious result counts as an attempt but is never rewarded, and never becomes the kernel the
trajectory stands on. A faster kernel does, and the next step starts from it. A step the harness could not
judge (`harness_error`) is kept in the replay buffer but teaches the KB nothing: it is no evidence about
the technique. Steps of a run without memory (an ablation) match no KB state and teach nothing. The
outcome's evidence keeps what the technique was chosen from and the lowering agent's reason.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import trajectory_note, write_note
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import (
    StepEnding,
    StepProgress,
    StepRecord,
    TrajectoryState,
    TrajectoryUpdate,
    faster_kernel,
)
from kernelblaster.kb.outcomes import EventId, OutcomeChoice, OutcomeEvent
from kernelblaster.kb.schema import OutcomeStatus

NODE = "record_step"

KB_STATUS: dict[str, OutcomeStatus] = {
    "measured": OutcomeStatus.MEASURED,
    "suspicious": OutcomeStatus.SUSPICIOUS,
    "compile_failed": OutcomeStatus.COMPILE_FAILED,
    "verify_failed": OutcomeStatus.VERIFY_FAILED,
    "crashed": OutcomeStatus.CRASHED,
}


def record_step(state: TrajectoryState, runtime: Runtime[RunContext], *, resources: RunResources) -> TrajectoryUpdate:
    step = state.this_step
    ending = step.ending
    assert ending is not None, "a step ends before it is recorded"
    candidate = step.candidate
    technique = candidate.technique if candidate else None
    reason = candidate.choice_reason if candidate else None
    speedup = state.current.time_ms / ending.after.time_ms if ending.after else None
    matched = state.matched
    record = StepRecord(
        iteration=state.iteration, trajectory=state.trajectory, step=state.step,
        state_id=matched.state_id if matched else None, state_name=matched.name if matched else None,
        discovered_state=matched.discovered if matched else False, technique=technique,
        predicted_speedup=next((c.expected_speedup for c in step.choices if c.technique == technique), None),
        outcome=ending.outcome, attempts=step.attempts, detail=ending.detail[:500], before=state.current,
        after=ending.after, speedup=speedup, choice_reason=reason,
        kb_updated=_teach_kb(resources, state, ending, technique, speedup),
        candidate_source=candidate.source if candidate else None,
        explanation=candidate.explanation if candidate else None,
    )
    write_note(runtime, trajectory_note(NODE, state, _describe(record)))
    return {"steps": [record], **_moved_on(state, ending, technique)}


def _teach_kb(resources: RunResources, state: TrajectoryState, ending: StepEnding, technique: str | None,
              speedup: float | None) -> bool:
    """Record the outcome in the KB; False when it is not a kernel's outcome in a KB state (no code was written,
    no state was matched) or the run writes no KB."""
    status = KB_STATUS.get(ending.outcome)
    if status is None or technique is None or state.matched is None:
        return False
    event = OutcomeEvent(
        event_id=EventId(run_id=state.run_id, iteration=state.iteration, trajectory=state.trajectory,
                         step=state.step),
        state_id=state.matched.state_id, technique=technique, status=status,
        speedup=speedup if status is OutcomeStatus.MEASURED else None, previous_technique=state.current.technique,
        choice=_choice(state.this_step),
    )
    return resources.record_outcome(event)


def _choice(step: StepProgress) -> OutcomeChoice | None:
    """What the technique was chosen from, and why (the lowering agent's reason), as evidence of the outcome."""
    if not step.choices:
        return None
    reason = step.candidate.choice_reason if step.candidate else None
    return OutcomeChoice(offered=[choice.technique for choice in step.choices], reason=reason)


def _moved_on(state: TrajectoryState, ending: StepEnding, technique: str | None) -> TrajectoryUpdate:
    measured = ending.after if ending.outcome == "measured" else None
    faster = measured if measured is not None and measured.time_ms < state.current.time_ms else None
    return {
        "current": faster or state.current,
        "best": faster_kernel(state.best, measured) or state.best,  # None only when both are
        "tried": [] if faster else [*state.tried, *([technique] if technique else [])],
        "failed_steps": 0 if measured else state.failed_steps + 1,
        "step": state.step + 1,
        "this_step": StepProgress(),
    }


def _describe(record: StepRecord) -> str:
    what = record.technique or "no code"
    if record.speedup is not None:
        return f"{what}: {record.outcome}, {record.speedup:.2f}x over the step's start"
    return f"{what}: {record.outcome}"
