"""harness/compare.py: output comparison (allclose + relative L2, NaN/Inf aware), poison and weak references,
chunk by chunk: every answer is the same whatever the chunk size."""

from __future__ import annotations

import math

import pytest
import torch

from kernelblaster.harness.compare import (
    POISON_BYTE,
    as_bytes,
    compare_output,
    identical,
    is_weak_reference,
    unwritten_elements,
)
from kernelblaster.harness.precision import Tolerance, tolerance_for

STRICT = tolerance_for(torch.float32, "strict")


@pytest.fixture
def reference() -> torch.Tensor:
    return torch.randn(64, 32, generator=torch.Generator().manual_seed(0))


def poisoned(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    tensor = torch.zeros(shape, dtype=dtype)
    tensor.reshape(-1).view(torch.uint8).fill_(POISON_BYTE)
    return tensor


def test_an_output_within_tolerance_passes(reference: torch.Tensor) -> None:
    result = compare_output(reference * (1 + 1e-6), reference, STRICT, "out")
    assert result.passed, result.detail
    assert result.mismatches == 0 and result.rel_l2 < 1e-5


def test_one_element_off_fails_and_the_detail_names_the_count_and_worst_element(reference: torch.Tensor) -> None:
    output = reference.clone()
    output[3, 5] += 1.0
    result = compare_output(output, reference, STRICT, "out")
    assert not result.passed
    assert result.mismatches == 1
    assert "1 of 2048 elements outside tolerance" in result.detail
    assert f"worst at element {3 * 32 + 5}" in result.detail
    assert f"expected {float(reference[3, 5]):.6g}" in result.detail
    assert result.detail.startswith("out: ")


def test_the_relative_l2_bound_fails_an_output_whose_every_element_is_within_the_elementwise_bound() -> None:
    reference = torch.linspace(1.0, 2.0, 1000)
    loose = Tolerance(rtol=0.5, atol_scale=0.0, max_rel_l2=1e-3)
    result = compare_output(reference * 1.01, reference, loose, "out")
    assert result.mismatches == 0
    assert not result.passed
    assert result.rel_l2 == pytest.approx(0.01, rel=1e-3)
    assert "rel L2 error 1.00e-02 (limit 1e-03)" in result.detail


def test_nan_in_the_reference_must_be_nan_in_the_output(reference: torch.Tensor) -> None:
    reference[0, 0] = math.nan
    output = reference.clone()
    assert compare_output(output, reference, STRICT, "out").passed
    output[0, 0] = 0.0
    result = compare_output(output, reference, STRICT, "out")
    assert not result.passed
    assert result.mismatches == 1 and "NaN must propagate" in result.detail


def test_a_spurious_nan_fails(reference: torch.Tensor) -> None:
    output = reference.clone()
    output[1, 2] = math.nan
    result = compare_output(output, reference, STRICT, "out")
    assert not result.passed
    assert result.mismatches == 1 and "NaN in the output" in result.detail


@pytest.mark.parametrize(("expected", "got"), [(math.inf, -math.inf), (math.inf, 3.0e38), (1.0, math.inf)])
def test_infinities_must_match_exactly(reference: torch.Tensor, expected: float, got: float) -> None:
    reference[2, 2] = expected
    output = reference.clone()
    output[2, 2] = got
    result = compare_output(output, reference, STRICT, "out")
    assert not result.passed
    assert "infinities" in result.detail


def test_matching_infinities_pass(reference: torch.Tensor) -> None:
    reference[2, 2], reference[4, 4] = math.inf, -math.inf
    assert compare_output(reference.clone(), reference, STRICT, "out").passed


def test_integer_outputs_must_match_exactly() -> None:
    reference = torch.arange(100, dtype=torch.int32)
    output = reference.clone()
    assert compare_output(output, reference, tolerance_for(torch.int32, "tf32"), "idx").passed
    output[7] += 1
    result = compare_output(output, reference, tolerance_for(torch.int32, "tf32"), "idx")
    assert not result.passed
    assert result.mismatches == 1 and "exact match required" in result.detail


@pytest.mark.parametrize(
    "output",
    [torch.zeros(64, 31), torch.zeros(32, 64), torch.zeros(64, 32, dtype=torch.float64)],
    ids=["shape", "transposed-shape", "dtype"],
)
def test_a_shape_or_dtype_mismatch_fails(reference: torch.Tensor, output: torch.Tensor) -> None:
    result = compare_output(output, reference, STRICT, "out")
    assert not result.passed
    assert "expected torch.float32[64, 32]" in result.detail


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8])
def test_unwritten_elements_counts_poisoned_elements(dtype: torch.dtype) -> None:
    output = poisoned((10,), dtype)
    assert unwritten_elements(output) == 10
    output[:7] = 0
    assert unwritten_elements(output) == 3


def test_unwritten_elements_works_for_a_zero_dimensional_tensor() -> None:
    output = poisoned((), torch.float32)
    assert unwritten_elements(output) == 1
    output.fill_(1.0)
    assert unwritten_elements(output) == 0


def test_an_element_with_only_some_poison_bytes_counts_as_written() -> None:
    output = poisoned((4,), torch.int32)
    output[0] = -256  # bytes 00 ff ff ff: written, though three bytes still look like poison
    assert unwritten_elements(output) == 3


def test_unwritten_elements_of_an_empty_tensor_is_zero() -> None:
    assert unwritten_elements(torch.empty(0, 3)) == 0


def test_poison_is_nan_in_float_formats_so_an_unwritten_float_output_fails(reference: torch.Tensor) -> None:
    result = compare_output(poisoned((64, 32), torch.float32), reference, STRICT, "out")
    assert not result.passed and result.mismatches == 64 * 32


@pytest.mark.parametrize(
    "tensor",
    [torch.zeros(100), torch.full((100,), 3.5), torch.full((10,), 1e-9) * torch.randn(10),
     torch.full((5,), 7, dtype=torch.int64), torch.tensor(2.0)],
    ids=["zeros", "constant", "near-zero", "int-constant", "scalar"],
)
def test_zero_constant_or_tiny_references_are_weak(tensor: torch.Tensor) -> None:
    assert is_weak_reference(tensor)


@pytest.mark.parametrize(
    "tensor",
    [torch.randn(100), torch.arange(10, dtype=torch.int64), torch.tensor([math.inf, 1.0, 2.0, math.nan])],
    ids=["random", "int-range", "finite-part-varies"],
)
def test_varying_references_are_not_weak(tensor: torch.Tensor) -> None:
    assert not is_weak_reference(tensor)


def test_as_bytes_gives_the_raw_bytes_of_a_zero_dimensional_tensor() -> None:
    assert as_bytes(torch.tensor(1.0)).tolist() == [0x00, 0x00, 0x80, 0x3F]


# ---- chunks ----------------------------------------------------------------------------------------------
# 2048 elements in chunks of 7: the last chunk is partial and every quantity crosses chunk boundaries.
CHUNK = 7


def test_a_chunked_comparison_finds_the_same_worst_element_and_errors(reference: torch.Tensor) -> None:
    output = reference * (1 + 2e-5)
    output[40, 3] += 0.5
    whole = compare_output(output, reference, STRICT, "out")
    chunked = compare_output(output, reference, STRICT, "out", chunk=CHUNK)
    assert chunked.detail == whole.detail
    assert (chunked.mismatches, chunked.passed) == (whole.mismatches, whole.passed) == (1, False)
    assert chunked.rel_l2 == pytest.approx(whole.rel_l2, rel=1e-9)
    assert f"worst at element {40 * 32 + 3}" in chunked.detail


def test_a_chunked_comparison_counts_special_value_mismatches_across_chunks(reference: torch.Tensor) -> None:
    reference.view(-1)[::100] = math.nan
    output = reference.clone()
    output.view(-1)[::200] = 0.0
    result = compare_output(output, reference, STRICT, "out", chunk=CHUNK)
    assert result.mismatches == len(range(0, 2048, 200))
    assert "NaN must propagate" in result.detail


def test_a_chunked_exact_comparison_counts_every_difference() -> None:
    reference = torch.arange(1000, dtype=torch.int64)
    output = reference.clone()
    output[[3, 500, 999]] = -1
    assert compare_output(output, reference, tolerance_for(torch.int64, "strict"), "idx", chunk=CHUNK).mismatches == 3


def test_unwritten_elements_are_counted_across_chunks() -> None:
    tensor = torch.randn(1000)
    tensor[100:350].view(torch.uint8).fill_(POISON_BYTE)
    assert unwritten_elements(tensor, chunk=CHUNK) == 250


def test_identical_compares_every_chunk_bitwise() -> None:
    tensor = torch.randn(1000)
    other = tensor.clone()
    assert identical(tensor, other, chunk=CHUNK)
    other.view(torch.int32)[999] += 1  # the next float32: one bit in the last element
    assert not identical(tensor, other, chunk=CHUNK)


def test_a_weak_reference_is_judged_the_same_in_chunks() -> None:
    varying, constant = torch.randn(1000), torch.full((1000,), 2.5)
    assert not is_weak_reference(varying, chunk=CHUNK)
    assert is_weak_reference(constant, chunk=CHUNK)


# ---- the pytorch-default policy: KernelBench's check ------------------------------------------------------


def test_pytorch_default_accepts_what_kernelbench_accepts_for_fp32(reference: torch.Tensor) -> None:
    kernelbench = tolerance_for(torch.float32, "pytorch-default")
    output = reference + 9e-3  # |out - ref| <= 1e-2 + 1e-2 * |ref| everywhere
    assert compare_output(output, reference, kernelbench, "out").passed
    assert not compare_output(output, reference, STRICT, "out").passed


def test_pytorch_default_rejects_an_absolute_error_beyond_its_atol() -> None:
    reference = torch.zeros(16)
    output = torch.full((16,), 0.011)
    result = compare_output(output, reference + 1e-30, tolerance_for(torch.float32, "pytorch-default"), "out")
    assert not result.passed and result.mismatches == 16
