"""harness/precision.py: tolerances per dtype and policy, and the baseline's matching TF32 freedom.

TF32 keeps 10 mantissa bits (like fp16). The GEMMs below emulate a TF32 tensor-core product exactly:
inputs rounded (or truncated, as some tensor-core paths do) to TF32, products summed in float64.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import torch

from kernelblaster.harness.compare import compare_output
from kernelblaster.harness.precision import PRECISION_POLICIES, PrecisionPolicy, tolerance_for, torch_precision


def to_tf32(tensor: torch.Tensor, truncate: bool = False) -> torch.Tensor:
    bits = tensor.contiguous().view(torch.int32)
    if not truncate:
        bits = bits + 0x1000  # round to nearest on the 13 dropped mantissa bits
    return (bits & ~0x1FFF).view(torch.float32)


Gemm = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@pytest.fixture(scope="module")
def gemm() -> Gemm:
    """(a, b, fp32-exact reference) for a 1024 x 256 x 1024 product: a million outputs."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(1024, 256, generator=generator)
    b = torch.randn(256, 1024, generator=generator)
    return a, b, (a.double() @ b.double()).float()


def tf32_product(a: torch.Tensor, b: torch.Tensor, truncate: bool) -> torch.Tensor:
    return (to_tf32(a, truncate).double() @ to_tf32(b, truncate).double()).float()


def test_an_fp32_gemm_passes_strict(gemm: Gemm) -> None:
    a, b, reference = gemm
    result = compare_output(a @ b, reference, tolerance_for(torch.float32, "strict"), "out")
    assert result.passed, result.detail


@pytest.mark.parametrize("truncate", [False, True], ids=["rounded", "truncated"])
def test_a_tf32_gemm_fails_strict(gemm: Gemm, truncate: bool) -> None:
    a, b, reference = gemm
    result = compare_output(tf32_product(a, b, truncate), reference, tolerance_for(torch.float32, "strict"), "out")
    assert not result.passed
    assert result.rel_l2 > 2e-4  # the TF32 error level the strict bound (1e-4) exists to reject


@pytest.mark.parametrize("policy", ["tf32", "fp16"])
@pytest.mark.parametrize("truncate", [False, True], ids=["rounded", "truncated"])
def test_a_tf32_gemm_passes_the_policies_that_allow_it(gemm: Gemm, truncate: bool, policy: PrecisionPolicy) -> None:
    a, b, reference = gemm
    result = compare_output(tf32_product(a, b, truncate), reference, tolerance_for(torch.float32, policy), "out")
    assert result.passed, result.detail


def test_strict_is_tighter_than_tf32_which_is_no_looser_than_fp16() -> None:
    strict, tf32, fp16 = (tolerance_for(torch.float32, p) for p in ("strict", "tf32", "fp16"))
    assert strict.max_rel_l2 < tf32.max_rel_l2 <= fp16.max_rel_l2
    assert strict.rtol < tf32.rtol <= fp16.rtol
    assert strict.atol_scale < tf32.atol_scale <= fp16.atol_scale


def test_a_gross_error_fails_even_the_loosest_policy(gemm: Gemm) -> None:
    reference = gemm[2]
    output = reference.clone()
    output[10, 10] += 0.1 * reference.abs().max()
    assert not compare_output(output, reference, tolerance_for(torch.float32, "fp16"), "out").passed


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.uint8])
@pytest.mark.parametrize("policy", PRECISION_POLICIES)
def test_integer_and_bool_outputs_are_exact_under_every_policy(dtype: torch.dtype, policy: PrecisionPolicy) -> None:
    assert tolerance_for(dtype, policy).exact


def test_half_and_double_outputs_have_their_own_tolerances() -> None:
    assert tolerance_for(torch.float64, "strict").max_rel_l2 < tolerance_for(torch.float32, "strict").max_rel_l2
    assert tolerance_for(torch.float16, "strict").max_rel_l2 > tolerance_for(torch.float32, "strict").max_rel_l2
    assert tolerance_for(torch.bfloat16, "strict").rtol > tolerance_for(torch.float16, "strict").rtol


def tf32_flags() -> tuple[bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@pytest.fixture
def restore_tf32_flags() -> Iterator[None]:
    saved = tf32_flags()
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize(("policy", "inside"), [("strict", (False, False)), ("tf32", (True, True)),
                                                ("pytorch-default", (False, True))])
@pytest.mark.parametrize("before", [(False, False), (True, True), (True, False)])
def test_torch_precision_sets_tf32_for_the_block_and_restores_it(
    restore_tf32_flags: None, policy: PrecisionPolicy, inside: tuple[bool, bool], before: tuple[bool, bool]
) -> None:
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    with torch_precision(policy):
        assert tf32_flags() == inside
    assert tf32_flags() == before


def test_torch_precision_restores_the_flags_after_an_exception(restore_tf32_flags: None) -> None:
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
    with pytest.raises(RuntimeError, match="inside"), torch_precision("tf32"):
        raise RuntimeError("inside")
    assert tf32_flags() == (False, True)


def test_two_threads_in_regions_of_the_same_flags_run_together(restore_tf32_flags: None) -> None:
    inside = threading.Barrier(2, timeout=5)  # both must be inside at once, or the barrier breaks

    def region() -> None:
        with torch_precision("strict"):
            inside.wait()

    threads = [threading.Thread(target=region) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not inside.broken


def test_a_region_of_other_flags_waits_until_the_others_end_and_each_sees_its_own(restore_tf32_flags: None) -> None:
    seen: list[tuple[str, tuple[bool, bool]]] = []
    strict_entered, tf32_started = threading.Event(), threading.Event()

    def other() -> None:
        tf32_started.set()
        with torch_precision("tf32"):
            seen.append(("tf32", tf32_flags()))

    with torch_precision("strict"):
        strict_entered.set()
        waiter = threading.Thread(target=other)
        waiter.start()
        tf32_started.wait(5)
        time.sleep(0.2)  # time enough for the other thread to have changed the flags, were it let in
        seen.append(("strict", tf32_flags()))
    waiter.join(timeout=10)
    assert seen == [("strict", (False, False)), ("tf32", (True, True))]


def test_a_region_of_other_flags_inside_one_in_the_same_thread_is_an_error(restore_tf32_flags: None) -> None:
    with torch_precision("strict"), pytest.raises(RuntimeError, match="inside one of"), torch_precision("tf32"):
        pass
    with torch_precision("strict"), torch_precision("strict"):
        assert tf32_flags() == (False, False)
