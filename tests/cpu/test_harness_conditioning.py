"""harness/conditioning.py with references.compute_case: tolerances that follow PyTorch's own fp32 error on each
case (against float64), so a kernel as accurate as PyTorch passes an ill-conditioned case (the issue's
Conv2d + InstanceNorm at inputs scaled by 1e-4, at a CPU test's size) and a wrong one still fails."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelblaster.harness.compare import compare_output
from kernelblaster.harness.conditioning import CONDITIONING_FACTOR, Conditioning, measure_conditioning, widen
from kernelblaster.harness.precision import tolerance_for
from kernelblaster.harness.problem import ProblemInstance, instantiate, load_problem
from kernelblaster.harness.references import TINY_SCALE, ReferenceCache, ReferenceCase, compute_case
from kernelblaster.harness.verify import VerificationContext

REPO = Path(__file__).resolve().parents[2]
CONV_NORM = REPO / "tests" / "fixtures" / "problems" / "conv_instancenorm_divide_small.py"
STRICT = tolerance_for(torch.float32, "strict")


def conv_norm_case(scale: float | None) -> tuple[ProblemInstance, ReferenceCase]:
    instance = instantiate(load_problem(CONV_NORM), 0, "cpu")
    special = None if scale is None else (f"inputs scaled by {scale:g}", lambda t: t.mul_(scale))
    return instance, compute_case(instance, special, float64=True)


def judge(outputs: list[torch.Tensor], case: ReferenceCase) -> tuple[bool, str]:
    context = VerificationContext(ReferenceCache(load_problem(CONV_NORM), 0, [0], "per_case", True), "strict",
                                  10.0, 1 << 20)
    check = context.compare_case(outputs, case, ["out"], "special_values", case.label)
    return check.passed, check.detail


def honest_conv_norm(instance: ProblemInstance, x: torch.Tensor,
                     operand: Callable[[torch.Tensor], torch.Tensor] = lambda t: t, skip_channel: bool = False
                     ) -> torch.Tensor:
    """Another correct fp32 algorithm: the convolution as unfold + one matrix product (its own summation
    order), InstanceNorm in two passes. `operand` rounds the product's operands (TF32's 10 mantissa bits);
    `skip_channel` leaves out the last input channel (skipped work)."""
    weight, bias = instance.initial_state["conv.weight"], instance.initial_state["conv.bias"]
    if skip_channel:
        weight = weight.clone()
        weight[:, -1] = 0.0
    batch, _, height, width = x.shape
    columns = operand(F.unfold(x, weight.shape[-1]))
    y = operand(weight.reshape(weight.shape[0], -1)) @ columns + bias[None, :, None]
    mean = y.mean(dim=-1, keepdim=True)
    variance = (y - mean).square().mean(dim=-1, keepdim=True)
    out = (y - mean) / torch.sqrt(variance + 1e-5) / 2.0
    side = height - weight.shape[-1] + 1
    return out.reshape(batch, weight.shape[0], side, width - weight.shape[-1] + 1)


def tf32(tensor: torch.Tensor) -> torch.Tensor:
    """Round to TF32's 10 explicit mantissa bits (round to nearest), kept in fp32."""
    bits = tensor.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


# ---- measuring and widening --------------------------------------------------------------------------------


def test_pytorchs_error_against_float64_is_its_largest_and_its_relative_l2_error() -> None:
    exact = torch.tensor([1.0, -2.0, 4.0, float("nan")], dtype=torch.float64)
    fp32 = torch.tensor([1.0, -2.5, 4.0, float("nan")])
    conditioning = measure_conditioning(fp32, exact)
    assert conditioning.max_error == pytest.approx(0.5)
    assert conditioning.rel_l2 == pytest.approx(0.5 / (1 + 4 + 16) ** 0.5)


def test_the_same_measurement_in_chunks_gives_the_same_conditioning() -> None:
    exact = torch.randn(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    fp32 = (exact * (1 + 1e-5)).float()
    whole, chunked = measure_conditioning(fp32, exact), measure_conditioning(fp32, exact, chunk=7)
    assert chunked.max_error == pytest.approx(whole.max_error) and chunked.rel_l2 == pytest.approx(whole.rel_l2)


def test_a_well_conditioned_case_keeps_the_policys_bound() -> None:
    widened = widen(STRICT, Conditioning(max_error=1e-8, rel_l2=1e-7))
    assert widened.max_rel_l2 == STRICT.max_rel_l2 and widened.error_floor == pytest.approx(32e-8)


def test_an_ill_conditioned_case_widens_the_bound_to_k_times_pytorchs_error() -> None:
    widened = widen(STRICT, Conditioning(max_error=1e-3, rel_l2=5e-4))
    assert widened.max_rel_l2 == pytest.approx(CONDITIONING_FACTOR * 5e-4)
    assert widened.error_floor == pytest.approx(CONDITIONING_FACTOR * 1e-3)


def test_an_exact_tolerance_is_never_widened() -> None:
    exact = tolerance_for(torch.int32, "strict")
    assert widen(exact, Conditioning(max_error=1.0, rel_l2=1.0)) == exact


def test_the_error_floor_accepts_an_element_the_policys_bound_alone_rejects() -> None:
    reference = torch.ones(100)
    output = reference.clone()
    output[7] += 0.01  # beyond rtol 1e-3, within a floor of 0.02
    assert not compare_output(output, reference, STRICT, "out").passed
    assert compare_output(output, reference, STRICT.model_copy(update={"error_floor": 0.02, "max_rel_l2": 1.0}),
                          "out").passed


# ---- the Conv2d + InstanceNorm at inputs scaled by 1e-4 ----------------------------------------------


def test_two_correct_fp32_conv_norms_disagree_beyond_the_policy_at_inputs_scaled_by_1e_4() -> None:
    """The false rejection as it was: another correct algorithm against PyTorch's fp32, the policy bound alone."""
    instance, case = conv_norm_case(TINY_SCALE)
    out = honest_conv_norm(instance, case.tensor_args[0])
    assert not compare_output(out, case.outputs[0], STRICT, "out").passed


def test_a_correct_conv_norm_passes_at_inputs_scaled_by_1e_4_against_float64() -> None:
    instance, case = conv_norm_case(TINY_SCALE)
    passed, detail = judge([honest_conv_norm(instance, case.tensor_args[0])], case)
    assert passed, detail


def test_pytorchs_own_fp32_output_passes_against_float64() -> None:
    _, case = conv_norm_case(TINY_SCALE)
    passed, detail = judge(case.outputs, case)
    assert passed, detail


def test_a_conv_norm_that_skips_an_input_channel_still_fails_at_inputs_scaled_by_1e_4() -> None:
    instance, case = conv_norm_case(TINY_SCALE)
    passed, detail = judge([honest_conv_norm(instance, case.tensor_args[0], skip_channel=True)], case)
    assert not passed and "judged against float64" in detail


def test_a_tf32_conv_norm_still_fails_strict_on_an_ordinary_seed() -> None:
    """Widening follows the case: on the well-conditioned seed case it is negligible, so TF32 operands fail."""
    instance, case = conv_norm_case(None)
    assert case.conditioning is not None and case.conditioning[0] is not None
    assert CONDITIONING_FACTOR * case.conditioning[0].rel_l2 < STRICT.max_rel_l2
    assert judge([honest_conv_norm(instance, case.tensor_args[0])], case)[0]
    assert not judge([honest_conv_norm(instance, case.tensor_args[0], operand=tf32)], case)[0]


def test_a_problem_that_cannot_run_in_float64_is_judged_against_fp32_with_the_policys_bound(tmp_path: Path) -> None:
    problem = tmp_path / "fixed_dtype.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.linear = nn.Linear(8, 4)\n\n"
        "    def forward(self, x):\n        return self.linear(x.float() if x.dtype != torch.float32 else x)"
        " @ torch.ones(4, 2)\n\n\n"
        "def get_inputs():\n    return [torch.randn(3, 8)]\n\n\ndef get_init_inputs():\n    return []\n")
    case = compute_case(instantiate(load_problem(problem), 0, "cpu"), None, float64=True)
    assert case.exact is None and case.conditioning is None
    assert case.expected(0, case.outputs[0]) is case.outputs[0]


# ---- where fp32 and float64 differ in kind -----------------------------------------------------------------

OVERFLOW_PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.exp(x * 30) / torch.exp(x * 30 - 1)  # e everywhere; NaN in fp32 where exp(30 x) overflows


def get_inputs():
    return [torch.randn(64, 8)]


def get_init_inputs():
    return []
"""


def overflow_case(tmp_path: Path) -> ReferenceCase:
    problem = tmp_path / "overflow.py"
    problem.write_text(OVERFLOW_PROBLEM)
    return compute_case(instantiate(load_problem(problem), 0, "cpu"), None, float64=True)


def judge_overflow(tmp_path: Path, output: torch.Tensor, case: ReferenceCase) -> bool:
    context = VerificationContext(ReferenceCache(load_problem(tmp_path / "overflow.py"), 0, [0], "per_case", True),
                                  "strict", 10.0, 1 << 20)
    return context.compare_case([output], case, ["out"], "correct", case.label).passed


def test_where_an_fp32_intermediate_overflows_pytorchs_nan_is_accepted(tmp_path: Path) -> None:
    case = overflow_case(tmp_path)
    assert case.outputs[0].isnan().any() and case.exact is not None and case.exact[0].isfinite().all()
    assert judge_overflow(tmp_path, case.outputs[0], case)


def test_where_an_fp32_intermediate_overflows_the_exact_value_is_accepted_too(tmp_path: Path) -> None:
    case = overflow_case(tmp_path)
    assert judge_overflow(tmp_path, torch.full_like(case.outputs[0], math.e), case)


def test_where_fp32_and_float64_agree_a_nan_is_still_wrong(tmp_path: Path) -> None:
    case = overflow_case(tmp_path)
    wrong = torch.full_like(case.outputs[0], math.e)
    finite = case.outputs[0].isfinite().reshape(-1).nonzero()
    wrong.view(-1)[int(finite[0])] = math.nan
    assert not judge_overflow(tmp_path, wrong, case)
