"""harness/special_values.py with references.compute_case: NaN and infinities judged by the outputs they reach
(found by finite perturbations on the trusted side), not by PyTorch's IEEE accidents; on CPU problems at small
sizes, the issue's causal attention and GEMM-sum rewrite among them."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelblaster.harness.problem import ProblemInstance, instantiate, load_problem
from kernelblaster.harness.references import ReferenceCache, ReferenceCase, compute_case
from kernelblaster.harness.special_values import Placement, reach_of
from kernelblaster.harness.verify import VerificationContext

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "problems"
ATTENTION = FIXTURES / "causal_attention_small.py"
GEMM_SUM = FIXTURES / "gemm_divide_sum_scale_small.py"
LINEAR_RELU = FIXTURES / "tiny_linear.py"
SMALL_PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return {expression}


def get_inputs():
    return [torch.randn(6, 10)]


def get_init_inputs():
    return []
"""


def small_problem(tmp_path: Path, expression: str) -> Path:
    path = tmp_path / "problem.py"
    path.write_text(SMALL_PROBLEM.format(expression=expression))
    return path

Transform = Callable[[torch.Tensor], object]


def placed_at(values: dict[tuple[int, ...], float]) -> Transform:
    """A transform putting each value at its index (the positions are the test's data)."""
    def place(tensor: torch.Tensor) -> None:
        for index, value in values.items():
            tensor[index] = value
    return place


def special_case(path: Path, transform: Transform) -> tuple[ProblemInstance, ReferenceCase]:
    instance = instantiate(load_problem(path), 0, "cpu")
    return instance, compute_case(instance, ("special values", transform), float64=True)


def judge(path: Path, outputs: list[torch.Tensor], case: ReferenceCase) -> tuple[bool, str]:
    context = VerificationContext(ReferenceCache(load_problem(path), 0, [0], "per_case", True), "strict", 10.0,
                                  1 << 20)
    names = [f"out{i}" for i in range(len(outputs))]
    check = context.compare_case(outputs, case, names, "special_values", case.label)
    return check.passed, check.detail


def attention_skipping_masked_work(instance: ProblemInstance, x: torch.Tensor, like_pytorch: bool = False
                                   ) -> torch.Tensor:
    """Causal attention as a flash-style kernel does it: row s looks at tokens 0..s only, never at later ones."""
    state = instance.initial_state
    heads = 2
    batch, tokens, channels = x.shape
    qkv = x @ state["c_attn.weight"].T + state["c_attn.bias"]
    q, k, v = (t.reshape(batch, tokens, heads, -1).transpose(1, 2) for t in qkv.split(channels, dim=2))
    y = torch.empty_like(q)
    for s in range(tokens):
        scores = q[:, :, s:s + 1] @ k[:, :, : s + 1].transpose(-2, -1) / math.sqrt(q.shape[-1])
        y[:, :, s] = (F.softmax(scores, dim=-1) @ v[:, :, : s + 1])[:, :, 0]
    y = y.transpose(1, 2).reshape(batch, tokens, channels)
    out = y @ state["c_proj.weight"].T + state["c_proj.bias"]
    if like_pytorch:  # what PyTorch's `att @ v` does: 0 * a later token's Inf value is NaN in every row
        finite_batch = x.isfinite().reshape(batch, -1).all(dim=1)
        out = torch.where(finite_batch[:, None, None], out, torch.nan)
    return out


# ---- where special values sit, and what they reach ---------------------------------------------------------


def test_the_placement_is_read_from_the_data_wherever_the_values_sit() -> None:
    original = torch.arange(12.0).reshape(3, 4)
    placed = original.clone()
    placed[1, 2], placed[2, 0], placed[0, 3] = math.nan, math.inf, -math.inf
    placement = Placement.of([original], [placed])
    assert placement.nan[0].index.tolist() == [6] and placement.nan[0].original.tolist() == [6.0]
    assert placement.inf[0].index.tolist() == [3, 8] and placement.inf[0].original.tolist() == [3.0, 8.0]


def test_a_value_already_non_finite_in_the_original_is_not_a_placed_one() -> None:
    original = torch.tensor([1.0, math.nan, 3.0])
    placed = torch.tensor([1.0, math.nan, math.inf])
    placement = Placement.of([original], [placed])
    assert placement.nan[0].count == 0 and placement.inf[0].index.tolist() == [2]


def test_restoring_a_placement_puts_back_each_special_value_with_its_sign() -> None:
    original = torch.zeros(4)
    placed = torch.tensor([math.inf, 0.0, -math.inf, math.nan])
    placement = Placement.of([original], [placed])
    placement.write([placed])
    assert placed.tolist() == [0.0, 0.0, 0.0, 0.0]
    placement.restore([placed])
    assert placed[:3].tolist() == [math.inf, 0.0, -math.inf] and placed[3].isnan()


def finite_state(x: torch.Tensor, special: dict[tuple[int, int], float]) -> tuple[torch.Tensor, Placement]:
    """A copy of `x` with `special` placed, then put back to its finite originals (as reach_of wants it)."""
    placed = x.clone()
    for index, value in special.items():
        placed[index] = value
    placement = Placement.of([x], [placed])
    placement.write([placed])
    return placed, placement


def test_an_elementwise_output_is_reached_by_its_own_input_alone() -> None:
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(1))
    tensor, placement = finite_state(x, {(2, 3): math.nan})
    reach = reach_of(lambda: [torch.sigmoid(tensor) * 2], [tensor], placement, [torch.sigmoid(x) * 2])
    assert reach[0].nan.nonzero().tolist() == [[2, 3]] and not reach[0].inf.any()


def test_a_reduction_output_is_reached_by_every_input_of_its_row() -> None:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(2))
    tensor, placement = finite_state(x, {(1, 5): math.inf})
    reach = reach_of(lambda: [tensor.sum(dim=1)], [tensor], placement, [x.sum(dim=1)])
    assert reach[0].inf.tolist() == [False, True, False, False]


def test_finding_the_reach_leaves_the_inputs_at_their_finite_originals() -> None:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(4))
    tensor, placement = finite_state(x, {(1, 5): math.inf, (2, 2): math.nan})
    reach_of(lambda: [tensor.sum(dim=1)], [tensor], placement, [x.sum(dim=1)])
    assert torch.equal(tensor, x)


def test_a_relu_is_reached_where_the_perturbation_moves_it_either_way() -> None:
    """Moved down, a negative input leaves relu at 0; moved up it does not: both directions are tried."""
    x = -torch.ones(2, 3)
    tensor, placement = finite_state(x, {(0, 1): math.nan})
    reach = reach_of(lambda: [torch.relu(tensor)], [tensor], placement, [torch.relu(x)])
    assert reach[0].nan.nonzero().tolist() == [[0, 1]]


def test_earlier_rows_of_causal_attention_are_not_reached_by_a_later_token() -> None:
    _, case = special_case(ATTENTION, placed_at({(0, 6, 3): math.inf}))
    assert case.special is not None
    rows = case.special.reach[0].inf[0].any(dim=1)  # batch 0, per token
    assert rows.tolist() == [False] * 6 + [True] * 6
    assert not case.special.reach[0].any[1].any()  # batch 1 untouched


# ---- the false rejections ------------------------------------------------------------------------


def test_pytorch_makes_the_earlier_rows_of_causal_attention_nan_for_an_inf_in_a_later_token() -> None:
    """The IEEE accident itself: masked zero weights times the later token's infinite value."""
    _, case = special_case(ATTENTION, placed_at({(0, 6, 3): math.inf}))
    assert case.outputs[0][0, :6].isnan().all()


def test_causal_attention_that_skips_masked_work_passes_with_an_inf_in_a_later_token() -> None:
    instance, case = special_case(ATTENTION, placed_at({(0, 6, 3): math.inf}))
    out = attention_skipping_masked_work(instance, case.tensor_args[0])
    assert out[0, :6].isfinite().all() and not out[0, 6:].isfinite().all(dim=1).any()
    passed, detail = judge(ATTENTION, [out], case)
    assert passed, detail


def test_causal_attention_that_reproduces_pytorchs_nan_rows_passes_too() -> None:
    instance, case = special_case(ATTENTION, placed_at({(0, 6, 3): math.inf}))
    out = attention_skipping_masked_work(instance, case.tensor_args[0], like_pytorch=True)
    passed, detail = judge(ATTENTION, [out], case)
    assert passed, detail


def test_causal_attention_that_turns_a_reached_nan_into_a_number_fails() -> None:
    instance, case = special_case(ATTENTION, placed_at({(0, 6, 3): math.nan}))
    out = torch.nan_to_num(attention_skipping_masked_work(instance, case.tensor_args[0]), nan=0.0)
    passed, detail = judge(ATTENTION, [out], case)
    assert not passed and "NaN" in detail


def test_causal_attention_that_skips_a_token_it_must_attend_to_fails() -> None:
    """Skipping work is still caught: row 8 ignores token 6, where the Inf sits, and stays finite."""
    instance, case = special_case(ATTENTION, placed_at({(0, 6, 3): math.inf}))
    x = case.tensor_args[0]
    out = attention_skipping_masked_work(instance, x)
    finite_x = x.clone()
    finite_x[0, 6, 3] = 0.0
    out[0, 8] = attention_skipping_masked_work(instance, finite_x)[0, 8]
    assert not judge(ATTENTION, [out], case)[0]


def test_the_gemm_sum_rewrite_gives_inf_where_pytorch_gives_nan_and_passes() -> None:
    instance, case = special_case(GEMM_SUM, placed_at({(3, 10): math.inf}))
    weight = instance.initial_state["weight"]
    out = case.tensor_args[0] @ weight.sum(dim=0).unsqueeze(1) * (1.5 / 2)  # x times W's column sums
    assert case.outputs[0][3].isnan().all() and out[3].isinf().all()
    passed, detail = judge(GEMM_SUM, [out], case)
    assert passed, detail


def test_a_relu_after_a_gemm_that_turns_nan_into_zero_fails() -> None:
    """examples/cheaters/nan_dropping_relu.cu's cheat: fmaxf(v, 0) returns 0 for a NaN pre-activation."""
    problem = LINEAR_RELU
    instance, case = special_case(problem, placed_at({(1, 2): math.nan}))
    state = instance.initial_state
    pre = case.tensor_args[0] @ state["linear.weight"].T + state["linear.bias"]
    out = torch.where(pre.isnan(), 0.0, torch.relu(pre))
    passed, detail = judge(problem, [out], case)
    assert not passed and "NaN must propagate" in detail


def test_a_nan_where_no_special_value_reaches_fails(tmp_path: Path) -> None:
    problem = small_problem(tmp_path, "x * torch.sigmoid(x) * 2")
    instance, case = special_case(problem, placed_at({(0, 0): math.nan}))
    expected = instance.reference([case.tensor_args[0]])[0]
    out = expected.clone()
    out[1, 1] = math.nan  # not reached: x[1, 1] is finite
    assert not judge(problem, [out], case)[0]
    assert judge(problem, [expected], case)[0]


def test_a_finite_output_reached_by_minus_inf_must_match_pytorchs_finite_value(tmp_path: Path) -> None:
    """Softmax of a row holding -Inf is finite (that element's weight is 0): NaN there is wrong."""
    problem = small_problem(tmp_path, "torch.softmax(x, dim=1)")
    _, case = special_case(problem, placed_at({(2, 5): -math.inf}))
    expected = case.outputs[0]
    assert expected[2].isfinite().all()
    wrong = expected.clone()
    wrong[2] = math.nan
    assert judge(problem, [expected], case)[0]
    assert not judge(problem, [wrong], case)[0]


def test_an_output_reached_through_a_coefficient_too_small_to_perturb_may_give_pytorchs_value(
        tmp_path: Path) -> None:
    """-Inf times 1e-12 is -Inf, so the ReLU gives 0; a perturbation times 1e-12 moves nothing, so the reach is
    not seen (an honest GEMM + ReLU failed so at 1 of 4M elements on an H200): PyTorch's 0 is right too."""
    problem = small_problem(tmp_path, "torch.relu(x * 1e-12 + 1.0)")
    _, case = special_case(problem, placed_at({(2, 5): -math.inf}))
    like_pytorch = case.outputs[0].clone()
    assert like_pytorch[2, 5] == 0.0
    passed, detail = judge(problem, [like_pytorch], case)
    assert passed, detail


def test_an_unreached_output_far_from_both_pytorch_and_the_finite_reference_fails(tmp_path: Path) -> None:
    problem = small_problem(tmp_path, "torch.relu(x * 1e-12 + 1.0)")
    _, case = special_case(problem, placed_at({(2, 5): -math.inf}))
    wrong = case.outputs[0].clone()
    wrong[2, 5] = 7.0
    assert not judge(problem, [wrong], case)[0]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_pytorchs_own_output_passes_for_every_kind_of_special_value(value: float) -> None:
    _, case = special_case(ATTENTION, placed_at({(1, 3, 7): value, (0, 0, 0): 1.0}))
    passed, detail = judge(ATTENTION, case.outputs, case)
    assert passed, detail
