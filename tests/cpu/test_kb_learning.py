"""Learning: outcome events update statistics and transitions; learning-step edits apply or are rejected."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from fixtures.kb.lookup import optimization_of
from pydantic import ValidationError

from kernelblaster.kb.codec import decode
from kernelblaster.kb.edits import (
    AddLesson,
    AddOptimization,
    AddState,
    Deprecate,
    MergeStates,
    SetDescription,
    SetPrior,
    apply_edits,
)
from kernelblaster.kb.errors import KBLookupError
from kernelblaster.kb.outcomes import EventId, OutcomeChoice, OutcomeEvent, apply_outcome
from kernelblaster.kb.paths import seed_kb_bytes
from kernelblaster.kb.schema import MAX_LESSONS, Category, KBDocument, OutcomeStats, OutcomeStatus, PerformanceState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
MEMORY = "memory_bandwidth_bound"


@pytest.fixture
def document() -> KBDocument:
    return decode(Path("seed_kb.json"), seed_kb_bytes()).document


def event(
    step: int,
    status: OutcomeStatus = OutcomeStatus.MEASURED,
    technique: str = "kernel_fusion",
    previous: str | None = None,
    run_id: str = "run-1",
) -> OutcomeEvent:
    return OutcomeEvent(
        event_id=EventId(run_id=run_id, iteration=1, trajectory=2, step=step),
        state_id=MEMORY,
        technique=technique,
        status=status,
        speedup=1.5 if status is OutcomeStatus.MEASURED else None,
        previous_technique=previous,
    )


def stats(document: KBDocument, technique: str = "kernel_fusion", state: str = MEMORY) -> OutcomeStats:
    return optimization_of(document.resolve_state(state), technique).stats


def test_measured_outcome_updates_the_optimization(document: KBDocument) -> None:
    apply_outcome(document, event(0), NOW)
    assert (stats(document).measured, stats(document).geomean_speedup, stats(document).updated_at) == (1, 1.5, NOW)


def test_each_failure_kind_is_counted_apart(document: KBDocument) -> None:
    for step, status in enumerate([OutcomeStatus.COMPILE_FAILED, OutcomeStatus.VERIFY_FAILED, OutcomeStatus.CRASHED]):
        apply_outcome(document, event(step, status), NOW)
    counted = stats(document)
    assert (counted.compile_failures, counted.verify_failures, counted.crashes, counted.attempts) == (1, 1, 1, 3)


def test_outcome_after_a_previous_technique_records_the_transition(document: KBDocument) -> None:
    apply_outcome(document, event(1, previous="coalesced_access"), NOW)
    transition = document.transition("coalesced_access", "kernel_fusion")
    assert transition is not None
    assert transition.stats.geomean_speedup == 1.5


def test_measured_event_without_speedup_is_invalid() -> None:
    with pytest.raises(ValidationError, match="speedup is given exactly when"):
        OutcomeEvent(
            event_id=EventId(run_id="r", iteration=0, trajectory=0, step=0),
            state_id=MEMORY,
            technique="kernel_fusion",
            status=OutcomeStatus.MEASURED,
        )


def test_how_a_technique_was_chosen_is_evidence_kept_with_the_outcome_and_changes_no_statistic(
        document: KBDocument) -> None:
    chosen = event(1).model_copy(update={"choice": OutcomeChoice(offered=["coalesced_access", "kernel_fusion"],
                                                                 reason="three kernels re-read the same rows")})
    plain = decode(Path("seed_kb.json"), seed_kb_bytes()).document
    apply_outcome(document, chosen, NOW)
    apply_outcome(plain, event(1), NOW)
    assert stats(document) == stats(plain)
    assert OutcomeEvent.model_validate_json(chosen.model_dump_json()).choice == chosen.choice


def test_a_choice_from_nothing_offered_is_invalid() -> None:
    with pytest.raises(ValidationError, match="offered"):
        OutcomeChoice(offered=[], reason="no reason")


def test_outcome_for_a_technique_the_state_lacks_is_refused(document: KBDocument) -> None:
    with pytest.raises(KBLookupError, match="has no technique 'tensor_core_mma'"):
        apply_outcome(document, event(0, technique="tensor_core_mma"), NOW)


def new_state(state_id: str = "spill_heavy_gemm") -> PerformanceState:
    return PerformanceState(
        id=state_id,
        name="Spill-heavy GEMM",
        primary_bottleneck="local memory traffic",
        description="A GEMM whose register tile is too large.",
        signature=[0.4] * 24,
        arches=["sm_90"],
    )


def test_each_valid_edit_kind_applies(document: KBDocument) -> None:
    results = apply_edits(
        document,
        [
            AddState(state=new_state()),
            AddOptimization(state_id="spill_heavy_gemm", technique="register_pressure_reduction", prior_speedup=1.3),
            AddOptimization(
                state_id=MEMORY,
                technique="warp_specialization",
                prior_speedup=1.2,
                category=Category.PARALLELISM,
                description="Split warps into producers and consumers of shared tiles.",
            ),
            SetPrior(state_id=MEMORY, technique="kernel_fusion", prior_speedup=1.9),
            SetDescription(target="technique", id="kernel_fusion", description="Fuse kernels, keeping data on chip."),
            AddLesson(state_id=MEMORY, technique="kernel_fusion", lesson="Fusing the softmax epilogue doubled speed."),
            Deprecate(state_id=MEMORY, technique="streaming_stores", reason="never measurable"),
            MergeStates(keep=MEMORY, merge="reduction_sync_bound"),
        ],
    )
    assert [result.reason for result in results if not result.applied] == []
    assert document.techniques["warp_specialization"].category == "parallelism"
    assert optimization_of(document.states[MEMORY], "kernel_fusion").prior_speedup == 1.9


def test_edit_naming_a_missing_state_is_rejected_with_a_reason(document: KBDocument) -> None:
    [result] = apply_edits(document, [SetPrior(state_id="nowhere", technique="kernel_fusion", prior_speedup=1.2)])
    assert not result.applied
    assert result.reason == "no state 'nowhere' in the KB"


def test_edit_naming_a_missing_technique_is_rejected_with_a_reason(document: KBDocument) -> None:
    [result] = apply_edits(document, [AddLesson(state_id=MEMORY, technique="magic", lesson="It was magic all along.")])
    assert result.reason == f"state {MEMORY} has no technique 'magic'"


def test_new_technique_without_a_description_is_rejected(document: KBDocument) -> None:
    [result] = apply_edits(document, [AddOptimization(state_id=MEMORY, technique="novel", prior_speedup=1.2)])
    assert "give its category and description" in result.reason
    assert "novel" not in document.techniques


def test_adding_a_known_technique_to_a_state_keeps_its_catalogue_entry_and_says_so(document: KBDocument) -> None:
    before = document.techniques["welford_norm"].model_copy()
    [result] = apply_edits(document, [AddOptimization(state_id="compute_bound_fp32", technique="welford_norm",
                                                      prior_speedup=1.2,
                                                      description="Something else entirely.", applies_to=["scan"])])
    assert result.applied
    assert document.techniques["welford_norm"] == before
    assert result.reason == ("technique welford_norm is already in the catalogue and its entry stays as it is: the "
                             "description, applies_to given here went unused (set_description rewrites a description)")


def test_adding_a_known_technique_with_its_own_catalogue_fields_notes_nothing(document: KBDocument) -> None:
    known = document.techniques["welford_norm"]
    [result] = apply_edits(document, [AddOptimization(state_id="compute_bound_fp32", technique="welford_norm",
                                                      prior_speedup=1.2, applies_to=known.applies_to)])
    assert result.applied and result.reason == ""


def test_raw_edit_breaking_a_bound_is_rejected_with_its_location(document: KBDocument) -> None:
    raw = {"kind": "set_prior", "state_id": MEMORY, "technique": "kernel_fusion", "prior_speedup": 40}
    [result] = apply_edits(document, [raw])
    assert not result.applied
    assert "set_prior.prior_speedup" in result.reason
    assert optimization_of(document.states[MEMORY], "kernel_fusion").prior_speedup == 1.6


def test_raw_edit_of_unknown_kind_is_rejected(document: KBDocument) -> None:
    [result] = apply_edits(document, [{"kind": "rewrite_everything"}])
    assert not result.applied
    assert "rewrite_everything" in result.reason


def test_rejected_edit_does_not_stop_the_valid_ones(document: KBDocument) -> None:
    results = apply_edits(
        document,
        [
            AddState(state=new_state(MEMORY)),
            SetPrior(state_id=MEMORY, technique="kernel_fusion", prior_speedup=1.7),
        ],
    )
    assert [result.applied for result in results] == [False, True]
    assert results[0].reason == f"state {MEMORY} already exists"


def test_lessons_keep_only_the_newest(document: KBDocument) -> None:
    lessons = [f"Lesson number {n} about fusion." for n in range(MAX_LESSONS + 2)]
    apply_edits(document, [AddLesson(state_id=MEMORY, technique="kernel_fusion", lesson=text) for text in lessons])
    assert optimization_of(document.states[MEMORY], "kernel_fusion").lessons == lessons[-MAX_LESSONS:]


def test_merged_state_adds_up_evidence_and_its_id_still_resolves(document: KBDocument) -> None:
    apply_outcome(document, event(0), NOW)
    duplicate = "reduction_sync_bound"
    optimization_of(document.states[duplicate], "kernel_fusion").stats = stats(document)
    apply_edits(document, [MergeStates(keep=MEMORY, merge=duplicate)])
    assert duplicate not in document.states
    merged_into = document.resolve_state(duplicate)
    assert merged_into is not None and merged_into.id == MEMORY
    assert stats(document).measured == 2
    assert document.states[MEMORY].optimization("warp_shuffle_reduction") is not None


def test_merging_a_state_into_itself_is_rejected(document: KBDocument) -> None:
    [result] = apply_edits(document, [{"kind": "merge_states", "keep": MEMORY, "merge": MEMORY}])
    assert "cannot be merged into itself" in result.reason


def test_added_state_signature_is_stored_to_four_decimals(document: KBDocument) -> None:
    state = new_state()
    state.signature = [0.123456789] * 24
    apply_edits(document, [AddState(state=state)])
    assert document.states[state.id].signature == [0.1235] * 24
