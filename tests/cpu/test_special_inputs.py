"""The inputs verification perturbs (harness/references.py): special values at many random places, the
structured cases that expose skipped work, and the strict-only cases, on CPU tensors."""

from __future__ import annotations

import pytest
import torch

from kernelblaster.harness.references import (
    LARGE_SCALE,
    MAX_SPECIAL_VALUES,
    SPECIAL_CASES,
    STRICT_CASES,
    WIDE_RANGE_EXPONENT,
    _one_large,
    _one_nan,
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


def test_strict_cases_are_not_among_the_cases_every_policy_runs() -> None:
    assert not {label for label, _ in STRICT_CASES} & {label for label, _ in SPECIAL_CASES}
