"""What a correct kernel must output when NaN and infinities sit in its inputs: the mathematics, not PyTorch's
IEEE accidents.

PyTorch's own result is not the rule: its causal attention multiplies masked (zero) weights by a later token's
value, so one Inf there makes whole rows NaN that do not depend on that token at all. The rule instead:

- which outputs a special value reaches is found on the trusted side by perturbing the inputs where the special
  values were placed (taken as data: wherever the inputs are non-finite and the originals were finite) with
  finite values, up and down, and seeing which outputs change (`reach_of`); the inputs are changed in place at
  those positions only, so no input is copied on the GPU;
- an output reached by a NaN, where PyTorch gives NaN, must be NaN; an output reached by a special value where
  PyTorch's result is non-finite must be non-finite (NaN for Inf is accepted: inf - inf is an order accident);
  an output reached where PyTorch's result is finite (softmax of a -Inf) must match it;
- an output not reached is judged as a finite value against the reference computed on the finite originals;
  where PyTorch's result on the special inputs differs (non-finite by accident, or reached through a coefficient
  too small for the perturbation to show), PyTorch's own value is accepted too.

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

Forward = Callable[[], list[torch.Tensor]]


def _flat_rms(tensor: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> float:
    """Root mean square of the finite elements, in float64 `chunk` elements at a time."""
    flat, squares, count = tensor.detach().reshape(-1), 0.0, 0
    for start in range(0, flat.numel(), chunk):
        part = flat[start:start + chunk].double()
        finite = part[part.isfinite()]
        squares, count = squares + float(finite.square().sum()), count + finite.numel()
    return math.sqrt(squares / count) if count else 0.0


@dataclass(frozen=True)
class Positions:
    """Where special values of one kind sit in one input (flat indices), the finite values they replaced and the
    special values themselves (signs and NaN payloads kept, to put them back)."""

    index: torch.Tensor
    original: torch.Tensor
    placed: torch.Tensor

    @property
    def count(self) -> int:
        return self.index.numel()


@dataclass(frozen=True)
class Placement:
    """Where NaN and where infinities were placed in each input, read from the data: wherever an input is
    non-finite and its original (kept on the host) was finite. Sparse, so an input of any size costs no copy."""

    nan: list[Positions]
    inf: list[Positions]

    @classmethod
    def of(cls, originals: Sequence[torch.Tensor], placed: Sequence[torch.Tensor]) -> Placement:
        nan: list[Positions] = []
        inf: list[Positions] = []
        for original, tensor in zip(originals, placed, strict=True):
            flat = tensor.detach().reshape(-1)
            index = (~flat.isfinite()).nonzero().squeeze(1)
            before = original.reshape(-1)[index.to(original.device)].to(flat.device)
            index, before = index[before.isfinite()], before[before.isfinite()]
            now = flat[index]
            is_nan = now.isnan()
            nan.append(Positions(index[is_nan], before[is_nan], now[is_nan]))
            inf.append(Positions(index[~is_nan], before[~is_nan], now[~is_nan]))
        return cls(nan, inf)

    @property
    def any(self) -> bool:
        return any(p.count for p in self.nan + self.inf)

    def write(self, tensors: Sequence[torch.Tensor], nan: Sequence[torch.Tensor] | None = None,
              inf: Sequence[torch.Tensor] | None = None) -> None:
        """Put values at the positions of each kind, in place (None: the original finite values)."""
        for kind, values in ((self.nan, nan), (self.inf, inf)):
            for tensor, positions, value in zip(tensors, kind, values or [p.original for p in kind], strict=True):
                tensor.view(-1)[positions.index] = value

    def restore(self, tensors: Sequence[torch.Tensor]) -> None:
        """Put the special values back where they were placed."""
        self.write(tensors, nan=[p.placed for p in self.nan], inf=[p.placed for p in self.inf])


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
    rms = _flat_rms(flat_b, chunk)
    found = torch.empty(flat_b.shape, dtype=torch.bool, device=flat_b.device)
    for start in range(0, flat_b.numel(), chunk):
        p, b = flat_p[start:start + chunk].double(), flat_b[start:start + chunk].double()
        moved = (p - b).abs() > CHANGE_THRESHOLD * (b.abs() + rms)
        same_special = (p.isnan() & b.isnan()) | (p.isinf() & (p == b))
        found[start:start + chunk] = torch.where(b.isfinite() & p.isfinite(), moved, ~same_special)
    return found.reshape(base.shape)


def reach_of(forward: Forward, inputs: Sequence[torch.Tensor], placement: Placement,
             base: Sequence[torch.Tensor]) -> list[Reach]:
    """Per output, the elements the NaN positions and the Inf positions reach. `inputs` hold the finite originals
    at every position (and are left so); `forward()` runs the reference on them and `base` is its result. Each
    kind's positions are moved up, then down, by PERTURBATION_SCALE times the input's rms: four passes at most."""
    deltas = [PERTURBATION_SCALE * rms if (rms := _flat_rms(t)) > 0 else 1.0 for t in inputs]

    def moved(kind: list[Positions], sign: float) -> list[torch.Tensor]:
        return [p.original + sign * delta for p, delta in zip(kind, deltas, strict=True)]

    def reached(kind: list[Positions], nan_kind: bool) -> list[torch.Tensor]:
        found = [torch.zeros_like(b, dtype=torch.bool) for b in base]
        if not any(p.count for p in kind):
            return found
        for sign in (1.0, -1.0):
            values = moved(kind, sign)
            placement.write(inputs, nan=values if nan_kind else None, inf=None if nan_kind else values)
            try:
                outputs = forward()
            finally:
                placement.write(inputs)
            for index, (output, reference) in enumerate(zip(outputs, base, strict=True)):
                found[index] |= changed(output, reference)
            del outputs
        return found

    nan, inf = reached(placement.nan, True), reached(placement.inf, False)
    return [Reach(nan=n, inf=i) for n, i in zip(nan, inf, strict=True)]


def expected_output(output: torch.Tensor, special: torch.Tensor, finite: torch.Tensor, reach: Reach,
                    chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """The tensor `output` must match (under `compare_output`'s rules) for the case with special values.

    `special` is PyTorch's output on the inputs with special values, `finite` the reference on the finite
    originals; elements the rules accept whatever the candidate's non-finite value are set to that value.
    Built `chunk` elements at a time: one new tensor of the output's size, bounded temporaries."""
    if not special.dtype.is_floating_point:
        return special
    expected = torch.empty_like(special)
    flat = expected.view(-1)
    parts = (output.detach().reshape(-1), special.reshape(-1), finite.reshape(-1), reach.nan.reshape(-1),
             reach.inf.reshape(-1))
    for start in range(0, flat.numel(), chunk):
        out, pytorch, fin, nan_reach, inf_reach = (p[start:start + chunk] for p in parts)
        reached = nan_reach | inf_reach
        pytorch_bad = ~pytorch.isfinite()
        value = torch.where(reached, pytorch, fin)
        # Reached by an Inf (or a NaN where PyTorch's result is Inf): any non-finite value is right.
        nan_required = nan_reach & pytorch.isnan()
        value = torch.where(reached & pytorch_bad & ~nan_required & ~out.isfinite(), out, value)
        # Not reached as far as the perturbations tell, yet PyTorch's value on the special inputs is another: its
        # algorithm made it non-finite (an IEEE accident), or a path with a tiny coefficient hid the reach (-Inf
        # times a weight of 1e-12 is -Inf, a perturbation times it is below rounding). PyTorch's value is
        # accepted beside the finite one: non-finite where the output is of its kind, finite where nearer.
        like_pytorch = (pytorch.isnan() & out.isnan()) | (pytorch.isinf() & (out == pytorch))
        nearer_pytorch = pytorch.isfinite() & ((out - pytorch).abs() < (out - fin).abs())
        accepted = ~reached & ((pytorch_bad & like_pytorch) | nearer_pytorch)
        flat[start:start + chunk] = torch.where(accepted, pytorch, value)
    return expected


def summary(reaches: Sequence[Reach]) -> str:
    """How many outputs the special values reach, for a check's detail."""
    nan = sum(int(r.nan.sum()) for r in reaches)
    inf = sum(int((r.inf & ~r.nan).sum()) for r in reaches)
    total = sum(r.nan.numel() for r in reaches)
    return f"{nan} of {total} output elements reached by a NaN, {inf} more by an infinity only"
