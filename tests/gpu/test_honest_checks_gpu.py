"""The checks judge the mathematics at KernelBench's real sizes: honest kernels for the three problems the issue's
false rejections came from are `ok` (an ill-conditioned InstanceNorm after a convolution, a causal attention that
skips masked work, an algebraic rewrite below the reference's compute floor), and cheating kernels for the same
problems (skipped work, a dropped NaN) still fail the check meant for them."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu.kernelbench_cases import ATTENTION, CHEATING, HONEST, KernelCase

from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions, evaluate_candidate
from kernelblaster.harness.problem import load_problem
from kernelblaster.harness.result import EvalResult

pytestmark = pytest.mark.gpu


def evaluated(case: KernelCase, cache_dir: Path) -> EvalResult:
    return evaluate_candidate(case.problem, case.kernel, EvalOptions(cache_dir=cache_dir, baseline=False))


def check_named(result: EvalResult, name: str) -> str:
    check = next((c for c in result.checks if c.name == name), None)
    assert check is not None, f"no check '{name}' in {[c.name for c in result.checks]}"
    assert check.passed, check.detail
    return check.detail


@pytest.mark.parametrize("case", HONEST, ids=lambda c: c.name)
def test_an_honest_kernel_for_a_kernelbench_problem_is_ok_at_its_real_size(case: KernelCase, cache_dir: Path) -> None:
    result = evaluated(case, cache_dir)
    assert result.verdict == "ok", result.summary


@pytest.mark.parametrize("case", CHEATING, ids=lambda c: c.name)
def test_a_cheating_kernel_for_a_kernelbench_problem_still_fails_its_check(case: KernelCase, cache_dir: Path) -> None:
    result = evaluated(case, cache_dir)
    assert result.verdict == "incorrect", result.summary
    assert result.failed_check is not None and result.failed_check.name == case.rejected_by, result.summary


def test_the_gemm_sum_rewrite_below_the_compute_floor_is_verified_further_not_rejected(cache_dir: Path) -> None:
    result = evaluated(HONEST[0], cache_dir)
    assert result.verdict == "ok", result.summary
    assert "random seeds" in check_named(result, "extra_verification")
    assert "compute floor" in check_named(result, "roofline")


def test_the_conv_norm_is_judged_against_float64_at_its_real_size(cache_dir: Path) -> None:
    result = evaluated(HONEST[1], cache_dir)
    assert result.verdict == "ok", result.summary
    assert result.memory is not None and result.memory.float64_references


def test_pytorch_makes_rows_nan_that_the_special_values_do_not_reach_in_causal_attention(cache_dir: Path) -> None:
    """The IEEE accident the honest attention kernel is spared, seen in the harness's own reference case."""
    evaluator = CandidateEvaluator(load_problem(ATTENTION), EvalOptions(cache_dir=cache_dir, baseline=False))
    try:
        label = next(label for label in evaluator.references.special_labels() if "NaN" in label)
        case = evaluator.references.special_case(label)
        assert case.special is not None
        unreached_nan = case.outputs[0].isnan() & ~case.special.reach[0].any
        assert bool(unreached_nan.any())
        assert bool(case.special.finite[0][unreached_nan].isfinite().all())
    finally:
        evaluator.close()
