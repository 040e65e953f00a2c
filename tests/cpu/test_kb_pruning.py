"""Pruning: what it removes (retired entries that never won, transitions selection cannot use or weighs
least) and what it never removes (anything still offered, any win, the catalogue, aliases, event records)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from fixtures.kb.learned import START, seed_document
from fixtures.kb.lookup import optimization_of

from kernelblaster.kb.edits import Deprecate, MergeStates, apply_edits
from kernelblaster.kb.outcomes import EventId, OutcomeEvent, apply_outcome
from kernelblaster.kb.pruning import PrunePolicy, prune
from kernelblaster.kb.schema import KBDocument, OutcomeStatus
from kernelblaster.kb.store import KnowledgeBase

MEMORY = "memory_bandwidth_bound"
LATENCY = "latency_occupancy_bound"


@pytest.fixture
def document() -> KBDocument:
    return seed_document()


def outcome(document: KBDocument, step: int, technique: str, speedup: float | None = None,
            state: str = MEMORY, previous: str | None = None) -> None:
    """Apply one outcome: measured at `speedup` if given, else a failed compile."""
    status = OutcomeStatus.MEASURED if speedup is not None else OutcomeStatus.COMPILE_FAILED
    event = OutcomeEvent(event_id=EventId(run_id="run", iteration=0, trajectory=0, step=step), state_id=state,
                         technique=technique, status=status, speedup=speedup, previous_technique=previous)
    assert apply_outcome(document, event, START + timedelta(minutes=step))


def retire(document: KBDocument, state: str, technique: str | None = None) -> None:
    [result] = apply_edits(document, [Deprecate(state_id=state, technique=technique, reason="retired by the test")])
    assert result.applied


def techniques_of(document: KBDocument, state: str) -> list[str]:
    return [opt.technique for opt in document.states[state].optimizations]


def test_a_retired_optimization_that_never_won_is_removed(document: KBDocument) -> None:
    outcome(document, 0, "streaming_stores")
    outcome(document, 1, "streaming_stores", speedup=0.9)
    retire(document, MEMORY, "streaming_stores")
    assert prune(document).optimizations == [f"{MEMORY}/streaming_stores"]
    assert "streaming_stores" not in techniques_of(document, MEMORY)


def test_a_retired_optimization_that_won_once_is_kept(document: KBDocument) -> None:
    outcome(document, 0, "streaming_stores", speedup=1.3)
    retire(document, MEMORY, "streaming_stores")
    assert prune(document).removed == []
    assert "streaming_stores" in techniques_of(document, MEMORY)


def test_an_optimization_still_offered_is_kept_however_often_it_failed(document: KBDocument) -> None:
    for step in range(20):
        outcome(document, step, "kernel_fusion")
    assert prune(document).removed == []
    assert optimization_of(document.states[MEMORY], "kernel_fusion").stats.compile_failures == 20


def test_a_retired_state_without_a_win_is_removed(document: KBDocument) -> None:
    outcome(document, 0, "split_k", state=LATENCY)
    retire(document, LATENCY)
    assert prune(document).states == [LATENCY]
    assert LATENCY not in document.states


def test_a_retired_state_with_a_win_is_kept(document: KBDocument) -> None:
    outcome(document, 0, "split_k", speedup=1.5, state=LATENCY)
    retire(document, LATENCY)
    assert prune(document).removed == []
    assert LATENCY in document.states


def test_a_retired_state_that_a_merged_id_leads_to_is_kept(document: KBDocument) -> None:
    apply_edits(document, [MergeStates(keep=LATENCY, merge="register_spilling")])
    retire(document, LATENCY)
    prune(document)
    assert document.resolve_state("register_spilling") is document.states[LATENCY]


def test_catalogue_techniques_and_aliases_are_never_removed(document: KBDocument) -> None:
    apply_edits(document, [MergeStates(keep=MEMORY, merge="reduction_sync_bound")])
    for state in document.states.values():
        if state.optimization("kernel_fusion"):
            retire(document, state.id, "kernel_fusion")
    techniques, aliases = dict(document.techniques), dict(document.state_aliases)
    prune(document)
    assert all(state.optimization("kernel_fusion") is None for state in document.states.values())
    assert (document.techniques, document.state_aliases) == (techniques, aliases)


def test_the_record_of_applied_events_is_never_pruned(document: KBDocument) -> None:
    outcome(document, 0, "streaming_stores")
    retire(document, MEMORY, "streaming_stores")
    prune(document)
    assert document.applied_steps == {"run": [[1]]}


def test_transitions_of_a_technique_no_state_offers_any_more_are_removed(document: KBDocument) -> None:
    outcome(document, 0, "streaming_stores", speedup=1.4, previous="kernel_fusion")
    outcome(document, 1, "coalesced_access", speedup=1.2, previous="kernel_fusion")
    retire(document, MEMORY, "streaming_stores")
    assert prune(document).transitions == ["kernel_fusion>streaming_stores"]
    assert [(t.before, t.after) for t in document.transitions] == [("kernel_fusion", "coalesced_access")]


def test_transitions_past_the_cap_lose_the_least_evidence_first(document: KBDocument) -> None:
    outcome(document, 0, "coalesced_access", speedup=1.1, previous="kernel_fusion")
    outcome(document, 1, "coalesced_access", speedup=1.1, previous="kernel_fusion")
    outcome(document, 2, "vectorized_access", speedup=1.3, previous="kernel_fusion")
    outcome(document, 3, "kernel_fusion", previous="coalesced_access")
    report = prune(document, PrunePolicy(max_transitions=2))
    assert report.transitions == ["coalesced_access>kernel_fusion"]
    report = prune(document, PrunePolicy(max_transitions=1))
    assert report.transitions == ["kernel_fusion>vectorized_access"]


def test_what_was_pruned_is_logged_in_the_document(document: KBDocument) -> None:
    retire(document, MEMORY, "streaming_stores")
    retire(document, LATENCY)
    prune(document, when=START)
    retire(document, MEMORY, "grid_size_tuning")
    prune(document, when=START + timedelta(days=1))
    log = document.pruned
    assert (log.optimizations, log.states, log.transitions) == (2, 1, 0)
    assert log.recent == [LATENCY, f"{MEMORY}/streaming_stores", f"{MEMORY}/grid_size_tuning"]
    assert log.last_pruned_at == START + timedelta(days=1)


def test_pruning_with_nothing_to_remove_changes_nothing(document: KBDocument) -> None:
    outcome(document, 0, "kernel_fusion", speedup=1.5, previous="coalesced_access")
    before = document.model_copy(deep=True)
    assert prune(document).removed == []
    assert document == before


def test_a_learning_update_prunes_in_the_same_write(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    [result] = kb.apply_edits([Deprecate(state_id=MEMORY, technique="streaming_stores", reason="never measurable")])
    assert result.applied
    on_disk = KnowledgeBase.load(tmp_path / "kb.json").document
    assert on_disk.states[MEMORY].optimization("streaming_stores") is None
    assert on_disk.pruned.recent == [f"{MEMORY}/streaming_stores"]
