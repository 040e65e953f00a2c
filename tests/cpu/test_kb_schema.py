"""The KB schema and the shipped seed KB: what a valid document is, and what the seed must contain."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from kernelblaster.kb.paths import seed_kb_bytes
from kernelblaster.kb.schema import KBDocument, Optimization, OutcomeStats, OutcomeStatus
from kernelblaster.kb.signature_fields import SIGNATURE_FIELDS, SIGNATURE_LENGTH, check_signature


def test_signature_layout_has_24_named_fields_in_the_contracted_order() -> None:
    assert SIGNATURE_LENGTH == 24
    assert SIGNATURE_FIELDS[:3] == ("sm_throughput", "memory_throughput", "dram_throughput")
    assert SIGNATURE_FIELDS[-2:] == ("local_spill", "launch_count")


def test_signature_of_wrong_length_is_rejected_with_the_expected_length() -> None:
    with pytest.raises(ValueError, match="24 values"):
        check_signature([0.5] * 23)


def test_signature_value_far_outside_unit_range_is_rejected_naming_the_field() -> None:
    values = [0.5] * SIGNATURE_LENGTH
    values[2] = 80.0
    with pytest.raises(ValueError, match="dram_throughput"):
        check_signature(values)


def test_seed_has_at_least_five_states_and_thirty_techniques(seed: KBDocument) -> None:
    assert len(seed.states) >= 5
    assert len(seed.techniques) >= 30


def test_seed_covers_the_bottlenecks_the_issue_names(seed: KBDocument) -> None:
    for state_id in (
        "memory_bandwidth_bound",
        "latency_occupancy_bound",
        "compute_bound_fp32",
        "launch_overhead_dominated",
        "tensor_core_eligible_unused",
    ):
        assert state_id in seed.states


def test_seed_has_states_for_the_kernelbench_families_the_generic_ones_miss(seed: KBDocument) -> None:
    for state_id in (
        "serial_dependency_chain",  # scans done element by element (level 1, 89-93)
        "attention_scores_materialised",
        "recurrence_step_launches",  # LSTM / GRU (level 3)
        "atomic_scatter_contention",  # scatter-form transposed convolutions
        "host_overhead_bound",  # a cudaMalloc per call, which ncu cannot see
    ):
        assert state_id in seed.states


def test_seed_has_techniques_for_the_patterns_of_kernelbench_problems(seed: KBDocument) -> None:
    for technique in (
        "parallel_scan", "flash_attention_tiling", "rnn_input_projection_hoisting", "persistent_recurrence",
        "depthwise_conv_tiling", "transposed_conv_gather", "direct_conv_tiling", "welford_norm",
        "hopper_wgmma_tma", "tma_bulk_copy", "thread_block_clusters", "redundant_work_elimination",
        "host_overhead_removal", "tiled_sgemm_fp32", "tf32x3_split",
    ):
        assert technique in seed.techniques


def test_seed_reduced_precision_techniques_are_not_valid_under_strict(seed: KBDocument) -> None:
    assert seed.techniques["tensor_core_mma"].precision_policies == ["fp16"]
    for technique in ("tensor_core_mma", "tensor_core_tf32", "hopper_wgmma_tma"):
        assert not seed.techniques[technique].valid_under("strict")
    for technique in ("tiled_sgemm_fp32", "tf32x3_split", "tma_bulk_copy", "thread_block_clusters"):
        assert seed.techniques[technique].valid_under("strict")


def test_seed_offers_every_catalogue_technique_in_some_state(seed: KBDocument) -> None:
    used = {opt.technique for state in seed.states.values() for opt in state.optimizations}
    assert used == set(seed.techniques)


def test_seed_states_each_offer_optimizations_with_priors_above_one(seed: KBDocument) -> None:
    for state in seed.states.values():
        assert len(state.optimizations) >= 5, state.id
        assert all(opt.prior_speedup > 1.0 for opt in state.optimizations), state.id


def test_seed_stall_shares_sum_to_one_like_the_harness_computes_them(seed: KBDocument) -> None:
    stalls = [i for i, name in enumerate(SIGNATURE_FIELDS) if name.startswith("stall_")]
    for state in seed.states.values():
        assert sum(state.signature[i] for i in stalls) == pytest.approx(1.0, abs=0.01), state.id


def test_seed_memory_bound_state_reads_as_memory_bound(seed: KBDocument) -> None:
    signature = dict(zip(SIGNATURE_FIELDS, seed.states["memory_bandwidth_bound"].signature, strict=True))
    stalls = {name: value for name, value in signature.items() if name.startswith("stall_")}
    assert signature["dram_throughput"] > 0.8
    assert signature["sm_throughput"] < 0.3
    assert max(stalls, key=stalls.__getitem__) == "stall_long_scoreboard"


def test_seed_is_compact() -> None:
    assert len(seed_kb_bytes()) < 40_000


def test_stats_whose_counts_do_not_add_up_are_invalid() -> None:
    inconsistent = OutcomeStats(attempts=3, measured=1, geomean_speedup=1.2)
    with pytest.raises(ValidationError, match=r"attempts \(3\) must equal"):
        Optimization(technique="kernel_fusion", prior_speedup=1.5, stats=inconsistent)


def test_stats_confidence_grows_with_measurements_toward_one() -> None:
    one = OutcomeStats(attempts=1, measured=1, wins=1, geomean_speedup=1.5)
    many = OutcomeStats(attempts=30, measured=30, wins=30, geomean_speedup=1.5)
    assert OutcomeStats().confidence == 0.0
    assert 0.0 < one.confidence < many.confidence < 1.0


def test_measured_outcomes_accumulate_a_geometric_mean() -> None:
    now = datetime.now(UTC)
    stats = OutcomeStats().with_outcome(OutcomeStatus.MEASURED, 2.0, now)
    stats = stats.with_outcome(OutcomeStatus.MEASURED, 0.5, now)
    assert stats.geomean_speedup == pytest.approx(1.0)
    assert (stats.measured, stats.wins, stats.best_speedup) == (2, 1, 2.0)


def test_suspicious_outcome_is_an_attempt_but_not_a_measurement() -> None:
    stats = OutcomeStats().with_outcome(OutcomeStatus.SUSPICIOUS, None, datetime.now(UTC))
    assert (stats.attempts, stats.suspicious, stats.measured, stats.wins) == (1, 1, 0, 0)
    assert stats.geomean_speedup is None
