"""harness/precision_facts.py: the error TF32, 3xTF32, fp16 and bf16 matrix products would give on a problem's
seed-0 inputs, judged by the verifier's comparison against the policy's bounds; and how the prompt says it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelblaster.harness.precision_facts import (
    ArithmeticOutcome,
    PrecisionFacts,
    ReducedProducts,
    measure_precision_facts,
    not_measured,
    round_to_tf32,
)
from kernelblaster.harness.problem import load_problem
from kernelblaster.nodes.briefing import arithmetic_line

GEMM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(512, 64)

    def forward(self, x):
        return self.gemm(x)

def get_inputs():
    return [torch.rand(32, 512)]

def get_init_inputs():
    return []
"""
ELEMENTWISE = GEMM.replace("return self.gemm(x)", "return torch.sigmoid(x) * 2.0")


def problem(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "problem.py"
    path.write_text(source)
    return path


def test_tf32_rounding_keeps_ten_mantissa_bits_rounding_to_nearest_even() -> None:
    ulp = 2.0**-10
    values = torch.tensor([1 + ulp / 2 + 2**-20, 1 + ulp / 4, 1 + ulp / 2, 1 + 3 * ulp / 2, -(1 + 3 * ulp / 4)])
    assert round_to_tf32(values).tolist() == [1 + ulp, 1.0, 1.0, 1 + 2 * ulp, -(1 + ulp)]


def test_tf32_rounding_leaves_infinities_and_nan_as_they_are() -> None:
    rounded = round_to_tf32(torch.tensor([float("inf"), float("-inf"), float("nan"), 3.4e38]))
    assert rounded[:2].tolist() == [float("inf"), float("-inf")] and rounded[2].isnan()
    assert rounded[3].isfinite()


def test_a_3xtf32_product_is_near_fp32_and_a_tf32_product_is_not() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(64, 1024, dtype=torch.float64), torch.randn(1024, 64, dtype=torch.float64)
    exact = a @ b
    errors = {}
    for arithmetic in ("tf32", "3xtf32"):
        with ReducedProducts(arithmetic) as mode:
            product = a.float() @ b.float()
        assert mode.products == 1
        errors[arithmetic] = float((product.double() - exact).norm() / exact.norm())
    fp32 = float(((a.float() @ b.float()).double() - exact).norm() / exact.norm())
    assert errors["3xtf32"] < 4 * fp32 < errors["tf32"] / 50


def test_3xtf32_adds_a_linear_layers_bias_once() -> None:
    torch.manual_seed(0)
    bias, a, b = torch.full((8,), 1000.0), torch.randn(4, 16), torch.randn(16, 8)
    with ReducedProducts("3xtf32"):
        split = torch.addmm(bias, a, b)
    assert torch.allclose(split, torch.addmm(bias, a, b), rtol=0, atol=1e-3)


def test_3xtf32_adds_a_convolutions_bias_once() -> None:
    torch.manual_seed(0)
    x, weight, bias = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.full((4,), 1000.0)
    with ReducedProducts("3xtf32"):
        split = torch.nn.functional.conv2d(x, weight, bias)
    assert torch.allclose(split, torch.nn.functional.conv2d(x, weight, bias), rtol=0, atol=1e-3)


def test_half_products_round_both_operands_to_half() -> None:
    a, b = torch.tensor([[1 + 2.0**-12]]), torch.tensor([[1.0]])
    with ReducedProducts("fp16"):
        assert (a @ b).item() == 1.0
    with ReducedProducts("tf32"):
        assert (a @ b).item() == 1.0
    assert (a @ b).item() == 1 + 2.0**-12


def test_a_gemm_under_strict_fails_tf32_half_products_and_passes_3xtf32(tmp_path: Path) -> None:
    facts = measure_precision_facts(load_problem(problem(tmp_path, GEMM)), "cpu", "strict")
    passes = {outcome.arithmetic: outcome.passes for outcome in facts.outcomes}
    assert facts.products and facts.reason is None and facts.max_rel_l2 == 1e-4
    assert passes == {"tf32": False, "3xtf32": True, "fp16": False, "bf16": False}
    tf32 = facts.outcome("tf32")
    assert tf32 is not None and tf32.rel_l2 > 1e-4 and tf32.outside > 0


def test_the_same_gemm_under_the_tf32_policy_passes_tf32(tmp_path: Path) -> None:
    facts = measure_precision_facts(load_problem(problem(tmp_path, GEMM)), "cpu", "tf32", ("tf32", "3xtf32"))
    assert [(o.arithmetic, o.passes) for o in facts.outcomes] == [("tf32", True), ("3xtf32", True)]


def test_a_problem_without_products_says_so_instead_of_measuring(tmp_path: Path) -> None:
    facts = measure_precision_facts(load_problem(problem(tmp_path, ELEMENTWISE)), "cpu", "strict")
    assert not facts.products and facts.outcomes == []
    assert facts.reason == "the forward pass has no matrix products or convolutions"


MEASURED = PrecisionFacts(policy="strict", max_rel_l2=1e-4, products=True, outcomes=[
    ArithmeticOutcome(arithmetic="tf32", passes=False, rel_l2=2.8e-4, outside=1234),
    ArithmeticOutcome(arithmetic="3xtf32", passes=True, rel_l2=4e-7, outside=0)])


def test_the_prompt_says_which_products_pass_with_their_errors() -> None:
    line = arithmetic_line(MEASURED, "strict")
    assert line.startswith("Cheaper matrix products, measured on this problem's seed-0 inputs")
    assert "TF32 fails (rel L2 2.8e-04, 1,234 elements outside the elementwise bound); 3xTF32 passes (rel L2 4.0e-07)" \
        in line


@pytest.mark.parametrize(("facts", "said"), [
    (None, "was not measured (this run started before it was measured)"),
    (not_measured("strict", "rendered on CPU by a stand-in, which measures nothing"),
     "was not measured (rendered on CPU by a stand-in, which measures nothing)"),
    (MEASURED.model_copy(update={"policy": "tf32"}), "was not measured (measured for tf32, not strict)"),
    (not_measured("strict", "no products", products=False), "has no matrix products or convolutions"),
])
def test_the_prompt_says_why_nothing_was_measured(facts: PrecisionFacts | None, said: str) -> None:
    assert said in arithmetic_line(facts, "strict")


def test_products_inside_a_fused_attention_are_said_to_be_out_of_reach(tmp_path: Path) -> None:
    source = GEMM.replace("return self.gemm(x)", "q = x.view(1, 1, 32, 512)\n"
                          "        return torch.nn.functional.scaled_dot_product_attention(q, q, q)")
    # The analysis counts attention's FLOPs; the measurement cannot split the fused operator's products.
    facts = measure_precision_facts(load_problem(problem(tmp_path, source)), "cpu", "strict",
                                    counted_flops=4 * 32**2 * 512)
    assert facts.products and facts.outcomes == []
    assert facts.reason is not None and "scaled_dot_product_attention" in facts.reason
    assert "was not measured (its products run inside fused operators" in arithmetic_line(facts, "strict")
