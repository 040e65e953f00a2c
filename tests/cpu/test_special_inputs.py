"""The inputs verification perturbs (harness/references.py): special values at many random places, the
structured cases that expose skipped work, and the strict-only cases, on CPU tensors."""

from __future__ import annotations

import time

import pytest
import torch

from kernelblaster.harness import references
from kernelblaster.harness.references import (
    LARGE_SCALE,
    MAX_SPECIAL_VALUES,
    PERMUTE_BELOW,
    SPECIAL_CASES,
    STRICT_CASES,
    WIDE_RANGE_EXPONENT,
    _one_large,
    _one_nan,
    _random_positions,
    _wide_range,
    _with_special_values,
    _zero_mean,
)


def special_positions(numel: int) -> set[int]:
    tensor = torch.rand(numel)
    _with_special_values(tensor)
    return set(torch.nonzero(~tensor.isfinite()).flatten().tolist())


def test_special_values_are_many_in_a_large_tensor() -> None:
    assert len(special_positions(1 << 20)) == MAX_SPECIAL_VALUES


def test_special_values_include_nan_and_both_infinities() -> None:
    tensor = torch.rand(1 << 16)
    _with_special_values(tensor)
    assert bool(tensor.isnan().any()) and bool((tensor == float("inf")).any())
    assert bool((tensor == float("-inf")).any())


def test_special_values_move_between_draws() -> None:
    assert special_positions(1 << 16) != special_positions(1 << 16)


def test_special_values_are_not_only_at_the_old_fixed_places() -> None:
    numel = 1 << 16
    assert special_positions(numel) - {0, numel // 2, numel - 1}


def test_special_values_fit_a_tensor_of_one_element() -> None:
    assert special_positions(1) == {0}


def test_one_nan_is_exactly_one() -> None:
    tensor = torch.rand(4096)
    _one_nan(tensor)
    assert int(tensor.isnan().sum()) == 1


def test_one_large_value_dominates_the_tensor_and_keeps_its_sign() -> None:
    tensor = -torch.rand(4096) - 0.5
    largest = float(tensor.abs().max())
    _one_large(tensor)
    assert float(tensor.min()) == pytest.approx(-LARGE_SCALE * largest, rel=1e-6)
    assert int((tensor.abs() > largest).sum()) == 1


def test_zero_mean_inputs_have_zero_mean() -> None:
    tensor = torch.rand(4096, dtype=torch.float64)
    _zero_mean(tensor)
    assert abs(float(tensor.mean())) < 1e-12


def test_wide_range_inputs_scale_each_element_by_a_power_of_two_within_the_bound() -> None:
    tensor = torch.rand(4096, dtype=torch.float64) + 1.0
    original = tensor.clone()
    _wide_range(tensor)
    exponents = torch.log2(tensor / original)
    assert torch.equal(exponents, exponents.round())
    assert int(exponents.abs().max()) <= WIDE_RANGE_EXPONENT and len(set(exponents.tolist())) > 3


def test_positions_in_a_huge_tensor_are_distinct_drawn_quickly_and_within_it() -> None:
    # 1e12 elements: a permutation could not even be allocated; draws take microseconds.
    started = time.perf_counter()
    positions = _random_positions(10**12, MAX_SPECIAL_VALUES).tolist()
    assert time.perf_counter() - started < 1.0
    assert len(set(positions)) == len(positions) == MAX_SPECIAL_VALUES
    assert all(0 <= p < 10**12 for p in positions)


def test_positions_just_above_the_permutation_size_cover_the_whole_tensor() -> None:
    numel = PERMUTE_BELOW + 1
    drawn = {p for _ in range(64) for p in _random_positions(numel, MAX_SPECIAL_VALUES).tolist()}
    assert min(drawn) < numel // 8 and max(drawn) > numel - numel // 8


def test_positions_of_a_tensor_smaller_than_the_count_are_all_of_it() -> None:
    assert sorted(_random_positions(5, MAX_SPECIAL_VALUES).tolist()) == [0, 1, 2, 3, 4]


def test_wide_range_chunks_each_draw_their_own_powers_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(references, "WIDE_RANGE_CHUNK", 256)
    tensor = torch.rand(4096, dtype=torch.float64) + 1.0
    original = tensor.clone()
    _wide_range(tensor)
    exponents = torch.log2(tensor / original)
    assert torch.equal(exponents, exponents.round()) and int(exponents.abs().max()) <= WIDE_RANGE_EXPONENT
    assert not torch.equal(exponents[:256], exponents[256:512])
    assert len(set(exponents[-256:].tolist())) > 3


def test_wide_range_scales_a_transposed_input_in_place() -> None:
    tensor = (torch.rand(64, 32) + 1.0).t()
    original = tensor.clone()
    _wide_range(tensor)
    exponents = torch.log2(tensor / original)
    assert torch.equal(exponents, exponents.round()) and int(exponents.abs().max()) <= WIDE_RANGE_EXPONENT
    assert len(set(exponents.flatten().tolist())) > 3


def test_strict_cases_are_not_among_the_cases_every_policy_runs() -> None:
    assert not {label for label, _ in STRICT_CASES} & {label for label, _ in SPECIAL_CASES}
