"""Keep the KB compact: drop optimizations that had a fair number of tries and never helped.

An optimization is judged only after `min_attempts` attempts (or once deprecated); a technique no state
offers any more leaves the catalogue, and so do transitions that lead to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from kernelblaster.kb.schema import KBDocument, Optimization


@dataclass(frozen=True)
class PrunePolicy:
    """How much evidence it takes to call an optimization useless."""

    min_attempts: int = 8


DEFAULT_POLICY = PrunePolicy()


class PruneReport(BaseModel):
    """What pruning removed, as `state/technique` pairs and technique names."""

    optimizations: list[str]
    techniques: list[str]
    transitions: int


def prune(document: KBDocument, policy: PrunePolicy = DEFAULT_POLICY) -> PruneReport:
    """Remove entries that never helped from `document` and say which."""
    removed: list[str] = []
    for state in document.states.values():
        removed += [f"{state.id}/{opt.technique}" for opt in state.optimizations if _never_helped(opt, policy)]
        state.optimizations = [opt for opt in state.optimizations if not _never_helped(opt, policy)]
    offered = {opt.technique for state in document.states.values() for opt in state.optimizations}
    orphans = sorted(set(document.techniques) - offered)
    for technique in orphans:
        del document.techniques[technique]
    kept_transitions = [t for t in document.transitions if t.after in offered and t.before in offered]
    dropped_transitions = len(document.transitions) - len(kept_transitions)
    document.transitions = kept_transitions
    return PruneReport(optimizations=removed, techniques=orphans, transitions=dropped_transitions)


def _never_helped(optimization: Optimization, policy: PrunePolicy) -> bool:
    judged = optimization.deprecated is not None or optimization.stats.attempts >= policy.min_attempts
    return judged and optimization.stats.wins == 0
