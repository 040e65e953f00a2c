"""Techniques and the problem's operations: a technique may say which kinds of operation it needs (any one
of them), and selection never offers it for a problem known to perform none of them; an unknown problem
(None) is offered everything its state and policy allow."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kernelblaster.kb.edits import AddOptimization, apply_edits
from kernelblaster.kb.operations import OPERATION_KINDS, OperationKind
from kernelblaster.kb.schema import Category, KBDocument, PerformanceState, Technique
from kernelblaster.kb.selection import select_optimizations
from kernelblaster.kb.summary import format_state

STREAMING_STATE = "memory_bandwidth_bound"


def offered(document: KBDocument, state: PerformanceState, operations: list[OperationKind] | None) -> set[str]:
    chosen = select_optimizations(state, len(state.optimizations), rng_seed=0, techniques=document.techniques,
                                  precision="strict", operations=operations)
    return {item.technique for item in chosen}


def test_a_lone_elementwise_problem_is_not_offered_fusion_norms_softmax_or_conv_techniques(seed: KBDocument) -> None:
    offers = offered(seed, seed.states[STREAMING_STATE], [])
    assert not offers & {"kernel_fusion", "welford_norm", "online_softmax_single_pass", "depthwise_conv_tiling",
                         "shared_memory_tiling"}
    assert {"vectorized_access", "coalesced_access", "streaming_stores"} <= offers


def test_a_lone_elementwise_problem_is_not_offered_staging_through_shared_memory(seed: KBDocument) -> None:
    # An elementwise pass reads each value once: a TMA tile or a cluster's shared memory has nothing to reuse.
    for state in seed.states.values():
        assert not offered(seed, state, []) & {"tma_bulk_copy", "thread_block_clusters", "double_buffering",
                                               "async_copy"}, state.id


def test_a_technique_is_offered_when_the_problem_performs_one_of_its_kinds(seed: KBDocument) -> None:
    assert "welford_norm" in offered(seed, seed.states[STREAMING_STATE], ["normalization"])
    assert "online_softmax_single_pass" in offered(seed, seed.states[STREAMING_STATE], ["attention"])


def test_a_problem_whose_operations_are_unknown_is_offered_every_technique_of_its_state(seed: KBDocument) -> None:
    state = seed.states[STREAMING_STATE]
    assert offered(seed, state, None) == {o.technique for o in state.optimizations}


def test_every_kind_a_seed_technique_names_is_one_the_harness_can_report(seed: KBDocument) -> None:
    named = {kind for technique in seed.techniques.values() for kind in technique.applies_to or []}
    assert named and named <= set(OPERATION_KINDS)


@pytest.mark.parametrize("kinds", [[], ["scan", "scan"], ["fft"]])
def test_technique_operation_list_must_be_non_empty_distinct_known_kinds(kinds: list[str]) -> None:
    with pytest.raises(ValidationError):
        Technique.model_validate({"category": Category.ALGORITHM, "description": "Scan in parallel blocks.",
                                  "applies_to": kinds})


def test_kb_show_says_which_operations_a_technique_is_for(seed: KBDocument) -> None:
    shown = format_state(seed, seed.states[STREAMING_STATE])
    assert "welford_norm (algorithm; for normalization; snippet welford)" in shown


def test_a_learned_technique_can_be_limited_to_the_operations_it_needs(seed: KBDocument) -> None:
    document = seed.model_copy(deep=True)
    [result] = apply_edits(document, [_learned_for(["scan"])])
    assert result.applied
    assert "segmented_scan_fusion" not in offered(document, document.states[STREAMING_STATE], ["reduction"])
    assert "segmented_scan_fusion" in offered(document, document.states[STREAMING_STATE], ["scan"])


def _learned_for(applies_to: list[OperationKind]) -> AddOptimization:
    return AddOptimization(state_id=STREAMING_STATE, technique="segmented_scan_fusion", prior_speedup=1.4,
                           category=Category.ALGORITHM, description="Fuse the scan with its producer.",
                           applies_to=applies_to)


def test_a_learned_technique_naming_one_of_its_problems_kinds_keeps_the_kinds_it_was_given() -> None:
    assert _learned_for(["scan"]).offered_for(["matmul", "scan"]).applies_to == ["scan"]


def test_a_learned_technique_naming_none_of_its_problems_kinds_is_widened_to_them() -> None:
    assert _learned_for(["scan"]).offered_for(["matmul", "softmax"]).applies_to == ["scan", "matmul", "softmax"]


def test_a_learned_technique_limited_on_a_problem_of_no_named_kind_loses_its_limit() -> None:
    assert _learned_for(["scan"]).offered_for([]).applies_to is None
