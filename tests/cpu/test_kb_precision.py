"""Techniques and precision policies: a technique says which policies its kernels can pass under, and selection
never offers it under any other; policy names are checked against the KB's list, which covers every policy
the harness and the run configuration know."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from kernelblaster.kb.edits import AddOptimization, apply_edits
from kernelblaster.kb.paths import seed_kb_bytes
from kernelblaster.kb.precision import PRECISION_POLICIES, check_precision_policy
from kernelblaster.kb.schema import Category, KBDocument, PerformanceState, Technique
from kernelblaster.kb.selection import select_optimizations
from kernelblaster.kb.store import KnowledgeBase

SEEDS = range(25)
TENSOR_CORE_STATE = "tensor_core_eligible_unused"


def offered(document: KBDocument, state: PerformanceState, precision: str, rng_seed: int = 0) -> list[str]:
    chosen = select_optimizations(state, len(state.optimizations), rng_seed=rng_seed,
                                  techniques=document.techniques, precision=precision)
    return [item.technique for item in chosen]


@pytest.mark.parametrize("precision", PRECISION_POLICIES)
def test_selection_never_offers_a_technique_invalid_under_the_runs_policy(seed: KBDocument, precision: str) -> None:
    for state in seed.states.values():
        for rng_seed in SEEDS:
            for technique in offered(seed, state, precision, rng_seed):
                assert seed.techniques[technique].valid_under(precision), (state.id, technique)


@pytest.mark.parametrize("precision", PRECISION_POLICIES)
def test_selection_offers_every_technique_valid_under_the_runs_policy(seed: KBDocument, precision: str) -> None:
    state = seed.states[TENSOR_CORE_STATE]
    valid = {o.technique for o in state.optimizations if seed.techniques[o.technique].valid_under(precision)}
    assert set(offered(seed, state, precision)) == valid


def test_strict_fp32_is_never_offered_reduced_precision_tensor_cores(seed: KBDocument) -> None:
    reduced = {"tensor_core_mma", "tensor_core_tf32", "hopper_wgmma_tma"}
    for state in seed.states.values():
        assert not reduced & set(offered(seed, state, "strict")), state.id


def test_strict_fp32_gemm_state_offers_tiled_sgemm_and_3xtf32_first_in_line(seed: KBDocument) -> None:
    state = seed.states[TENSOR_CORE_STATE]
    chosen = select_optimizations(state, 3, rng_seed=0, techniques=seed.techniques, precision="strict")
    best = max(chosen, key=lambda item: item.first_pick_probability)
    assert best.technique == "tiled_sgemm_fp32" and best.snippet == "tiled_sgemm"
    assert {"tiled_sgemm_fp32", "tf32x3_split"} <= set(offered(seed, state, "strict"))


def test_fp16_policy_is_offered_half_precision_tensor_cores(seed: KBDocument) -> None:
    assert "tensor_core_mma" in offered(seed, seed.states[TENSOR_CORE_STATE], "fp16")


def test_unknown_policy_is_a_value_error_naming_the_known_ones(seed: KBDocument) -> None:
    with pytest.raises(ValueError, match="pytorch-default"):
        offered(seed, seed.states[TENSOR_CORE_STATE], "bf16")
    with pytest.raises(ValueError, match="unknown precision policy 'fp8'"):
        check_precision_policy("fp8")


def test_technique_without_policies_is_valid_under_every_policy() -> None:
    technique = Technique(category=Category.MEMORY, description="Coalesce the loads of every warp.")
    assert all(technique.valid_under(policy) for policy in PRECISION_POLICIES)


@pytest.mark.parametrize("policies", [[], ["strict", "strict"], ["fp8"]])
def test_technique_policy_list_must_be_non_empty_distinct_known_names(policies: list[str]) -> None:
    with pytest.raises(ValidationError):
        Technique.model_validate({"category": Category.COMPUTE, "description": "Use tensor cores somehow.",
                                  "precision_policies": policies})


def test_technique_naming_a_snippet_that_is_not_shipped_is_invalid() -> None:
    with pytest.raises(ValidationError, match="no shipped snippet named 'no_such_snippet'"):
        Technique(category=Category.COMPUTE, description="Tile the GEMM.", snippet="no_such_snippet")


def test_learned_technique_can_be_restricted_to_policies(seed: KBDocument) -> None:
    document = seed.model_copy(deep=True)
    edit = AddOptimization(state_id=TENSOR_CORE_STATE, technique="fp8_operands", prior_speedup=2.0,
                           category=Category.COMPUTE, description="Run the products with fp8 operands.",
                           precision_policies=["fp16"])
    [result] = apply_edits(document, [edit])
    assert result.applied
    assert "fp8_operands" not in offered(document, document.states[TENSOR_CORE_STATE], "strict")
    assert "fp8_operands" in offered(document, document.states[TENSOR_CORE_STATE], "fp16")


def test_kb_file_written_before_policies_and_snippets_existed_still_loads(tmp_path: Path) -> None:
    data = json.loads(seed_kb_bytes())
    for technique in data["techniques"].values():
        technique.pop("precision_policies", None)
        technique.pop("snippet", None)
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(data))
    kb = KnowledgeBase.load(path)
    assert all(t.precision_policies is None and t.snippet is None for t in kb.document.techniques.values())


def test_selection_from_the_store_follows_the_policy(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    state = kb.document.states[TENSOR_CORE_STATE]
    strict = kb.select_optimizations(state, len(state.optimizations), rng_seed=0, precision="strict")
    loose = kb.select_optimizations(state, len(state.optimizations), rng_seed=0, precision="tf32")
    assert "tensor_core_tf32" not in {item.technique for item in strict}
    assert "tensor_core_tf32" in {item.technique for item in loose}
