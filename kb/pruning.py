"""Keep the KB small as it grows, without forgetting what it learned: the only place the KB removes entries.

The store prunes after every learning update (`KnowledgeBase.apply_edits`). What goes is what no longer
takes part in selection and never helped:
- a deprecated optimization (retired by the learning step) that never won;
- a deprecated state none of whose optimizations ever won, unless a merged state's id still leads to it;
- a transition from or to a technique that no live optimization offers any more (selection cannot use it);
- past `max_transitions`, the transitions with the least evidence (fewest measured outcomes, then fewest
  attempts, then the oldest): they move selection least, since evidence weighs n / (n + 3) against the
  state-level estimate.
What stays, always: every optimization still offered (whatever its record), every optimization and state
that ever won, every catalogue technique, every state alias, and the record of applied events. Each
removal is counted in the document's `pruned` log, which `kernelblaster kb stats` prints, and the latest
states and optimizations removed are named there (transitions come and go by the hundred, so they are
only counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel

from kernelblaster.kb.schema import MAX_RECENTLY_PRUNED, KBDocument, PerformanceState, Transition


@dataclass(frozen=True)
class PrunePolicy:
    """How much phase-ordering evidence to keep: technique pairs grow with the square of the catalogue."""

    max_transitions: int = 256

    def __post_init__(self) -> None:
        if self.max_transitions < 0:
            raise ValueError("max_transitions must not be negative")


DEFAULT_POLICY = PrunePolicy()


class PruneReport(BaseModel):
    """What one pruning removed: `state/technique` optimizations, state ids, `before>after` transitions."""

    optimizations: list[str]
    states: list[str]
    transitions: list[str]

    @property
    def removed(self) -> list[str]:
        return [*self.states, *self.optimizations, *self.transitions]


def prune(document: KBDocument, policy: PrunePolicy = DEFAULT_POLICY, when: datetime | None = None) -> PruneReport:
    """Remove what no longer takes part in selection and never helped from `document`, log it there, and
    say what went."""
    report = PruneReport(
        states=_prune_states(document),
        optimizations=_prune_optimizations(document),
        transitions=_prune_transitions(document, policy),
    )
    if report.removed:
        _log(document, report, when or datetime.now(UTC).replace(microsecond=0))
    return report


def _prune_states(document: KBDocument) -> list[str]:
    alias_targets = set(document.state_aliases.values())
    removed = [
        state_id
        for state_id, state in document.states.items()
        if state.deprecated is not None and state_id not in alias_targets and not _ever_won(state)
    ]
    for state_id in removed:
        del document.states[state_id]
    return removed


def _ever_won(state: PerformanceState) -> bool:
    return any(optimization.stats.wins for optimization in state.optimizations)


def _prune_optimizations(document: KBDocument) -> list[str]:
    removed = []
    for state in document.states.values():
        retired = {opt.technique for opt in state.optimizations if opt.deprecated is not None and not opt.stats.wins}
        if retired:
            removed += [f"{state.id}/{opt.technique}" for opt in state.optimizations if opt.technique in retired]
            state.optimizations = [opt for opt in state.optimizations if opt.technique not in retired]
    return removed


def _prune_transitions(document: KBDocument, policy: PrunePolicy) -> list[str]:
    offered = _offered_techniques(document)
    living = [t for t in document.transitions if {t.before, t.after} <= offered]
    excess = len(living) - policy.max_transitions
    if excess > 0:
        weakest = {_pair(t) for t in sorted(living, key=_evidence)[:excess]}
        living = [t for t in living if _pair(t) not in weakest]
    kept = {_pair(t) for t in living}
    removed = [f"{t.before}>{t.after}" for t in document.transitions if _pair(t) not in kept]
    document.transitions = living
    return removed


def _pair(transition: Transition) -> tuple[str, str]:
    return (transition.before, transition.after)


def _offered_techniques(document: KBDocument) -> set[str]:
    return {
        optimization.technique
        for state in document.states.values()
        if state.deprecated is None
        for optimization in state.optimizations
        if optimization.deprecated is None
    }


def _evidence(transition: Transition) -> tuple[int, int, datetime]:
    stats = transition.stats
    return (stats.measured, stats.attempts, stats.updated_at or datetime.min.replace(tzinfo=UTC))


def _log(document: KBDocument, report: PruneReport, when: datetime) -> None:
    log = document.pruned
    document.pruned = log.model_copy(
        update={
            "optimizations": log.optimizations + len(report.optimizations),
            "states": log.states + len(report.states),
            "transitions": log.transitions + len(report.transitions),
            "last_pruned_at": when,
            "recent": [*log.recent, *report.states, *report.optimizations][-MAX_RECENTLY_PRUNED:],
        }
    )
