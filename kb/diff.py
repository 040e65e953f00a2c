"""What changed between two versions of a KB (say, two iteration snapshots): states and what describes them,
optimizations, priors, evidence."""

from __future__ import annotations

from pydantic import BaseModel

from kernelblaster.kb.schema import KBDocument, Optimization, PerformanceState

# The fields that say what a state is; its optimizations are compared one by one instead.
EXCERPT_CHARS = 57  # of a long text in a change line
EXCERPT_LEAD = 20  # characters shown before the first difference
_STATE_FIELDS = ("name", "primary_bottleneck", "secondary", "description", "signature", "arches", "deprecated")


class StateChange(BaseModel):
    """Which descriptive fields of one state differ between the two versions."""

    state_id: str
    changes: list[str]


class OptimizationChange(BaseModel):
    """How one optimization of one state differs between the two versions."""

    state_id: str
    technique: str
    changes: list[str]


class KBDiff(BaseModel):
    """The differences between a `before` and an `after` KB."""

    states_added: list[str]
    states_removed: list[str]
    states_changed: list[StateChange]
    techniques_added: list[str]
    techniques_removed: list[str]
    optimizations_added: list[str]
    optimizations_removed: list[str]
    optimizations_changed: list[OptimizationChange]

    @property
    def empty(self) -> bool:
        return not any(self.model_dump().values())


def diff_documents(before: KBDocument, after: KBDocument) -> KBDiff:
    added, removed, changed = [], [], []
    for state_id in sorted(before.states.keys() | after.states.keys()):
        old = _optimizations(before, state_id)
        new = _optimizations(after, state_id)
        added += [f"{state_id}/{name}" for name in sorted(new.keys() - old.keys())]
        removed += [f"{state_id}/{name}" for name in sorted(old.keys() - new.keys())]
        for name in sorted(old.keys() & new.keys()):
            changes = _optimization_changes(old[name], new[name])
            if changes:
                changed.append(OptimizationChange(state_id=state_id, technique=name, changes=changes))
    return KBDiff(
        states_added=sorted(after.states.keys() - before.states.keys()),
        states_removed=sorted(before.states.keys() - after.states.keys()),
        states_changed=[StateChange(state_id=state_id, changes=changes)
                        for state_id in sorted(before.states.keys() & after.states.keys())
                        if (changes := _state_changes(before.states[state_id], after.states[state_id]))],
        techniques_added=sorted(after.techniques.keys() - before.techniques.keys()),
        techniques_removed=sorted(before.techniques.keys() - after.techniques.keys()),
        optimizations_added=added,
        optimizations_removed=removed,
        optimizations_changed=changed,
    )


def _state_changes(old: PerformanceState, new: PerformanceState) -> list[str]:
    changes = []
    for field in _STATE_FIELDS:
        before, after = getattr(old, field), getattr(new, field)
        if before == after:
            continue
        changes.append(f"{field} changed" if field == "signature" else f"{field}: {_change(before, after)}")
    return changes


def _change(before: object, after: object) -> str:
    """`old -> new`, long texts cut to the stretch where they first differ (a change at the end of a
    description must show)."""
    old, new = _text(before), _text(after)
    differs_at = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    start = max(0, differs_at - EXCERPT_LEAD)
    return f"{_excerpt(old, start)} -> {_excerpt(new, start)}"


def _text(value: object) -> str:
    return "-" if value is None or value == [] else ", ".join(value) if isinstance(value, list) else str(value)


def _excerpt(text: str, start: int) -> str:
    if len(text) <= EXCERPT_CHARS:
        return text
    start = min(start, max(0, len(text) - EXCERPT_CHARS))
    piece = text[start:start + EXCERPT_CHARS]
    return f"{'...' if start else ''}{piece}{'...' if start + EXCERPT_CHARS < len(text) else ''}"


def _optimizations(document: KBDocument, state_id: str) -> dict[str, Optimization]:
    state = document.states.get(state_id)
    return {opt.technique: opt for opt in state.optimizations} if state else {}


def _optimization_changes(old: Optimization, new: Optimization) -> list[str]:
    changes = []
    if old.prior_speedup != new.prior_speedup:
        changes.append(f"prior {old.prior_speedup:.2f}x -> {new.prior_speedup:.2f}x")
    if old.stats.attempts != new.stats.attempts:
        changes.append(f"attempts {old.stats.attempts} -> {new.stats.attempts}")
    if old.stats.geomean_speedup != new.stats.geomean_speedup:
        changes.append(f"geomean {_speedup(old.stats.geomean_speedup)} -> {_speedup(new.stats.geomean_speedup)}")
    changes += [f"lesson: {lesson}" for lesson in new.lessons if lesson not in old.lessons]
    if old.deprecated != new.deprecated:
        changes.append(f"deprecated: {new.deprecated or 'no longer'}")
    return changes


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_diff(diff: KBDiff) -> str:
    if diff.empty:
        return "no differences"
    lines = [f"+ state {name}" for name in diff.states_added]
    lines += [f"- state {name}" for name in diff.states_removed]
    lines += [f"~ state {c.state_id}: {'; '.join(c.changes)}" for c in diff.states_changed]
    lines += [f"+ technique {name}" for name in diff.techniques_added]
    lines += [f"- technique {name}" for name in diff.techniques_removed]
    lines += [f"+ {name}" for name in diff.optimizations_added]
    lines += [f"- {name}" for name in diff.optimizations_removed]
    lines += [f"~ {c.state_id}/{c.technique}: {'; '.join(c.changes)}" for c in diff.optimizations_changed]
    return "\n".join(lines)
