"""What a correct kernel must output when NaN and infinities sit in its inputs: the mathematics, not PyTorch's
IEEE accidents.

PyTorch's own result is not the rule: its causal attention multiplies masked (zero) weights by a later token's
value, so one Inf there makes whole rows NaN that do not depend on that token at all. The rule instead:

- which outputs a special value reaches is found on the trusted side by perturbing the inputs where the special
  values were placed (taken as data: wherever the inputs are non-finite and the finite originals were not) with
  finite values, up and down, and seeing which outputs change (`reach_of`);
- an output reached by a NaN, where PyTorch gives NaN, must be NaN; an output reached by a special value where
  PyTorch's result is non-finite must be non-finite (NaN for Inf is accepted: inf - inf is an order accident);
  an output reached where PyTorch's result is finite (softmax of a -Inf) must match it;
- an output not reached is judged as a finite value against the reference computed on the finite originals;
  where PyTorch happened to make it non-finite, PyTorch's own value is accepted too.

`expected_output` folds these rules into one expected tensor, so `compare.compare_output` judges it with its
usual NaN/Inf and tolerance rules. A perturbation too small to change an output leaves it unreached: that is
the lenient side (PyTorch's value is accepted there), never a false rejection.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

# Perturbations are this many times the tensor's rms: far above rounding, far below overflow.
PERTURBATION_SCALE = 4.0
# An output changed when it moved by more than this share of (|value| + the output's rms), or changed class.
CHANGE_THRESHOLD = 1e-6
DEFAULT_CHUNK = 1 << 23

Forward = Callable[[list[torch.Tensor]], list[torch.Tensor]]


@dataclass(frozen=True)
class Placement:
    """Where special values were placed in each perturbed input (boolean masks of its shape)."""

    nan: list[torch.Tensor]
    inf: list[torch.Tensor]

    @classmethod
    def of(cls, originals: Sequence[torch.Tensor], placed: Sequence[torch.Tensor]) -> Placement:
        """Read from the data: non-finite now, and not already so in the original."""
        return cls(nan=[p.isnan() & ~o.isnan() for o, p in zip(originals, placed, strict=True)],
                   inf=[p.isinf() & ~o.isinf() for o, p in zip(originals, placed, strict=True)])

    @property
    def any(self) -> bool:
        return any(bool(mask.any()) for mask in self.nan + self.inf)


@dataclass(frozen=True)
class Reach:
    """Which elements of one output change when the inputs at the NaN (or Inf) positions change."""

    nan: torch.Tensor
    inf: torch.Tensor

    @property
    def any(self) -> torch.Tensor:
        return self.nan | self.inf


def changed(perturbed: torch.Tensor, base: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """Elements that moved beyond rounding noise, or changed between finite and non-finite (`chunk` elements
    at a time, so the float64 temporaries stay bounded)."""
    if not base.dtype.is_floating_point:
        return perturbed != base
    flat_p, flat_b = perturbed.detach().reshape(-1), base.detach().reshape(-1)
    squares, count = 0.0, 0
    for start in range(0, flat_b.numel(), chunk):
        part = flat_b[start:start + chunk].double()
        finite = part[part.isfinite()]
        squares, count = squares + float(finite.square().sum()), count + finite.numel()
    rms = math.sqrt(squares / count) if count else 0.0
    found = torch.empty(flat_b.shape, dtype=torch.bool, device=flat_b.device)
    for start in range(0, flat_b.numel(), chunk):
        p, b = flat_p[start:start + chunk].double(), flat_b[start:start + chunk].double()
        moved = (p - b).abs() > CHANGE_THRESHOLD * (b.abs() + rms)
        same_special = (p.isnan() & b.isnan()) | (p.isinf() & (p == b))
        found[start:start + chunk] = torch.where(b.isfinite() & p.isfinite(), moved, ~same_special)
    return found.reshape(base.shape)


def _perturbed(originals: Sequence[torch.Tensor], masks: Sequence[torch.Tensor], sign: float) -> list[torch.Tensor]:
    tensors = []
    for original, mask in zip(originals, masks, strict=True):
        finite = original[original.isfinite()]
        rms = float(finite.double().square().mean().sqrt()) if finite.numel() else 0.0
        delta = PERTURBATION_SCALE * rms if rms > 0 else 1.0
        tensors.append(torch.where(mask, original + sign * delta, original))
    return tensors


def reach_of(forward: Forward, originals: Sequence[torch.Tensor], placement: Placement,
             base: Sequence[torch.Tensor]) -> list[Reach]:
    """Per output, the elements the NaN positions and the Inf positions reach; `base` is `forward(originals)`.
    Four forward passes at most (each kind of position moved up, then down, where there are any)."""
    def reached(masks: list[torch.Tensor]) -> list[torch.Tensor]:
        found = [torch.zeros_like(b, dtype=torch.bool) for b in base]
        if not any(bool(mask.any()) for mask in masks):
            return found
        for sign in (1.0, -1.0):
            outputs = forward(_perturbed(originals, masks, sign))
            for index, (output, reference) in enumerate(zip(outputs, base, strict=True)):
                found[index] |= changed(output, reference)
            del outputs
        return found

    nan, inf = reached(placement.nan), reached(placement.inf)
    return [Reach(nan=n, inf=i) for n, i in zip(nan, inf, strict=True)]


def expected_output(output: torch.Tensor, special: torch.Tensor, finite: torch.Tensor, reach: Reach) -> torch.Tensor:
    """The tensor `output` must match (under `compare_output`'s rules) for the case with special values.

    `special` is PyTorch's output on the inputs with special values, `finite` the reference on the finite
    originals; elements the rules accept whatever the candidate's non-finite value are set to that value."""
    if not special.dtype.is_floating_point:
        return special
    reached = reach.any
    special_bad = ~special.isfinite()
    expected = torch.where(reached, special, finite)
    # Reached by an Inf (or a NaN where PyTorch's result is Inf): any non-finite value is right.
    nan_required = reach.nan & special.isnan()
    any_non_finite = reached & special_bad & ~nan_required & ~output.isfinite()
    expected = torch.where(any_non_finite, output, expected)
    # Not reached, but PyTorch's algorithm made it non-finite: PyTorch's value is accepted beside the finite one.
    like_pytorch = (special.isnan() & output.isnan()) | (special.isinf() & (output == special))
    return torch.where(~reached & special_bad & like_pytorch, special, expected)


def summary(reaches: Sequence[Reach]) -> str:
    """How many outputs the special values reach, for a check's detail."""
    nan = sum(int(r.nan.sum()) for r in reaches)
    inf = sum(int((r.inf & ~r.nan).sum()) for r in reaches)
    total = sum(r.nan.numel() for r in reaches)
    return f"{nan} of {total} output elements reached by a NaN, {inf} more by an infinity only"
