"""What cheaper arithmetic in the matrix products would do to this problem's outputs, measured: the
reference forward pass run again with the operands of every matrix product and convolution rounded to
TF32, split into 3xTF32, or rounded to fp16 or bf16, compared with the fp32 reference by the verifier's
own comparison against the run's precision policy. The agents are told which pass, instead of a blanket
rule.

How each is measured (the same on any device, so the logic is checked on CPU tensors): an operand is
rounded to nearest (what cvt.rna.tf32.f32 and a cast to half do) and the product of the rounded operands is
computed in fp32, as tensor cores multiply exactly and accumulate in fp32; 3xTF32 is big*big + big*small +
small*big with big = tf32(x) and small = tf32(x - big). The inputs are the verifier's seed-0 inputs. On the
GPU it runs once per problem and policy (`CandidateEvaluator.precision_facts`, cached on disk).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from pydantic import BaseModel, Field
from torch.utils._python_dispatch import TorchDispatchMode

from kernelblaster.harness.compare import compare_output
from kernelblaster.harness.precision import PrecisionPolicy, tolerance_for, torch_precision
from kernelblaster.harness.problem import Problem, instantiate

Arithmetic = Literal["tf32", "3xtf32", "fp16", "bf16"]
ARITHMETICS: tuple[Arithmetic, ...] = ("tf32", "3xtf32", "fp16", "bf16")
FUSED = ("its products run inside fused operators (such as scaled_dot_product_attention) that the measurement "
         "does not split")
aten = torch.ops.aten
# Operator -> positions of its two product operands (bias and scalars stay fp32, as in a kernel's epilogue).
_PRODUCTS: dict[Any, tuple[int, int]] = {aten.mm.default: (0, 1), aten.bmm.default: (0, 1),
                                         aten.addmm.default: (1, 2), aten.baddbmm.default: (1, 2),
                                         aten.convolution.default: (0, 1)}
# Where each operator's additive term sits (bias or `input`), which only the first of 3xTF32's products keeps.
_ADDEND = {aten.addmm.default: 0, aten.baddbmm.default: 0, aten.convolution.default: 2}


class ArithmeticOutcome(BaseModel):
    """How one arithmetic did on the problem: its worst output's relative L2 error and elements out of bounds."""

    arithmetic: Arithmetic
    passes: bool
    rel_l2: float = Field(description="The largest relative L2 error over the outputs")
    outside: int = Field(description="Elements outside the elementwise bound, over all outputs")


class PrecisionFacts(BaseModel):
    """The measured outcomes, or why there are none (`reason`)."""

    policy: PrecisionPolicy
    max_rel_l2: float = Field(description="The policy's relative L2 bound for fp32 outputs")
    products: bool = Field(description="Whether the forward pass has matrix products or convolutions")
    outcomes: list[ArithmeticOutcome] = []
    reason: str | None = Field(default=None, description="Why nothing was measured (no GPU, no products ...)")
    measured_on: str | None = Field(default=None, description="The device the passes ran on (cuda:0, cpu)")

    def outcome(self, arithmetic: Arithmetic) -> ArithmeticOutcome | None:
        return next((o for o in self.outcomes if o.arithmetic == arithmetic), None)


def round_to_tf32(tensor: torch.Tensor) -> torch.Tensor:
    """fp32 values rounded to nearest (ties to even) at TF32's 10 mantissa bits; Inf and NaN stay so."""
    bits = tensor.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
    rounded = torch.where(rounded >= 1 << 31, rounded - (1 << 32), rounded).to(torch.int32).view(torch.float32)
    return torch.where(tensor.isfinite(), rounded.view(tensor.shape), tensor)


def _rounder(arithmetic: Arithmetic) -> Callable[[torch.Tensor], torch.Tensor]:
    if arithmetic in ("tf32", "3xtf32"):
        return round_to_tf32
    half = torch.float16 if arithmetic == "fp16" else torch.bfloat16
    return lambda tensor: tensor.to(half).to(tensor.dtype)


class ReducedProducts(TorchDispatchMode):
    """Runs every fp32 matrix product and convolution with its operands in `arithmetic` (see the module
    docstring); everything else runs as it is."""

    def __init__(self, arithmetic: Arithmetic) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves TorchDispatchMode.__init__ unannotated
        self.arithmetic = arithmetic
        self._round = _rounder(arithmetic)
        self.products = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        positions = _PRODUCTS.get(func)
        if positions is None or not all(args[p].dtype == torch.float32 for p in positions):
            return func(*args, **kwargs)
        self.products += 1
        first, second = (args[p] for p in positions)
        big_first, big_second = self._round(first), self._round(second)
        result = func(*_with(args, positions, big_first, big_second), **kwargs)
        if self.arithmetic != "3xtf32":
            return result
        small_first, small_second = self._round(first - big_first), self._round(second - big_second)
        without_addend = _without_addend(func, args, kwargs)
        for pair in ((big_first, small_second), (small_first, big_second)):
            result = result + func(*_with(without_addend, positions, *pair), **_unscaled(func, kwargs))
        return result


def _with(args: tuple[Any, ...], positions: tuple[int, int], first: torch.Tensor,
          second: torch.Tensor) -> tuple[Any, ...]:
    replaced = list(args)
    replaced[positions[0]], replaced[positions[1]] = first, second
    return tuple(replaced)


def _without_addend(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The arguments with the bias (convolution) or the added `input` (addmm: scaled by beta=0) taken out."""
    position = _ADDEND.get(func)
    if position is None:
        return args
    replaced = list(args)
    replaced[position] = None if func is aten.convolution.default else torch.zeros_like(args[position])
    return tuple(replaced)


def _unscaled(func: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in kwargs.items() if key != "beta"} | (
        {"beta": 0} if func in (aten.addmm.default, aten.baddbmm.default) else {})


def measure_precision_facts(problem: Problem, device: str, policy: PrecisionPolicy,
                            arithmetics: tuple[Arithmetic, ...] = ARITHMETICS,
                            counted_flops: int = 0) -> PrecisionFacts:
    """Run the problem's seed-0 case on `device` in fp32 and in each arithmetic; compare as the verifier does.
    `counted_flops` (the analysis's FLOP count) tells products run inside fused operators, which are not split,
    from no products at all."""
    max_rel_l2 = tolerance_for(torch.float32, policy).max_rel_l2
    instance = instantiate(problem, 0, device)
    with torch_precision("strict"):
        reference = instance.reference()
    outcomes = []
    products = True
    for arithmetic in arithmetics:
        mode = ReducedProducts(arithmetic)
        with torch_precision("strict"), mode:
            outputs = instance.reference()
        if mode.products == 0:
            products = False
            break
        comparisons = [compare_output(out, ref, tolerance_for(ref.dtype, policy), f"output {index}")
                       for index, (out, ref) in enumerate(zip(outputs, reference, strict=True))]
        del outputs
        outcomes.append(ArithmeticOutcome(arithmetic=arithmetic, passes=all(c.passed for c in comparisons),
                                          rel_l2=max(c.rel_l2 for c in comparisons),
                                          outside=sum(c.mismatches for c in comparisons)))
    if not products and counted_flops > 0:
        return PrecisionFacts(policy=policy, max_rel_l2=max_rel_l2, products=True, reason=FUSED)
    if not products:
        return PrecisionFacts(policy=policy, max_rel_l2=max_rel_l2, products=False,
                              reason="the forward pass has no matrix products or convolutions")
    return PrecisionFacts(policy=policy, max_rel_l2=max_rel_l2, products=True, outcomes=outcomes, measured_on=device)


def not_measured(policy: PrecisionPolicy, reason: str, products: bool = True) -> PrecisionFacts:
    """Facts that say why nothing was measured."""
    return PrecisionFacts(policy=policy, max_rel_l2=tolerance_for(torch.float32, policy).max_rel_l2,
                          products=products, reason=reason)
