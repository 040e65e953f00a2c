"""Compare a candidate's output with the reference: allclose and relative L2, NaN/Inf-aware, plus poison.

Where the reference is NaN the candidate must be NaN; where it is +-Inf the candidate must match exactly;
everywhere else both the elementwise bound and the global relative-L2 bound must hold. Every function works
through the tensors in chunks of `chunk` elements, so its temporaries stay bounded whatever the tensor's
size (a 6 GiB output costs a few hundred MiB, never a float64 copy of the whole tensor).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from pydantic import BaseModel

from kernelblaster.harness.precision import Tolerance

POISON_BYTE = 0xFF  # all-ones bytes: NaN in every float format, -1 in integers, so unwritten elements stand out
DEFAULT_CHUNK = 1 << 23


class Comparison(BaseModel):
    passed: bool
    detail: str
    rel_l2: float = 0.0
    mismatches: int = 0


def as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 tensor (flattened first: a 0-d tensor has no byte view)."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def _chunks(tensors: tuple[torch.Tensor, ...], chunk: int) -> Iterator[tuple[int, tuple[torch.Tensor, ...]]]:
    """(offset, flat slices) of equally shaped tensors, `chunk` elements at a time."""
    flats = tuple(t.detach().reshape(-1) for t in tensors)
    total = flats[0].numel()
    for start in range(0, total, chunk):
        yield start, tuple(f[start:start + chunk] for f in flats)


def unwritten_elements(output: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> int:
    """Elements whose every byte still holds the poison pattern written before the call."""
    count = 0
    for _, (part,) in _chunks((output,), chunk):
        raw = as_bytes(part).reshape(part.numel(), part.element_size())
        count += int((raw == POISON_BYTE).all(dim=1).sum().item())
    return count


def identical(a: torch.Tensor, b: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> bool:
    """Bitwise equality of two tensors of one shape and dtype (NaN payloads included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return all(torch.equal(as_bytes(x), as_bytes(y)) for _, (x, y) in _chunks((a, b), chunk))


def compare_output(output: torch.Tensor, reference: torch.Tensor, tolerance: Tolerance, label: str,
                   chunk: int = DEFAULT_CHUNK) -> Comparison:
    if output.shape != reference.shape or output.dtype != reference.dtype:
        return Comparison(passed=False, detail=f"{label}: got {output.dtype}{list(output.shape)}, "
                          f"expected {reference.dtype}{list(reference.shape)}")
    if tolerance.exact:
        mismatches = sum(int((x != y).sum().item()) for _, (x, y) in _chunks((output, reference), chunk))
        return Comparison(passed=mismatches == 0, mismatches=mismatches,
                          detail=f"{label}: {mismatches} of {output.numel()} elements differ (exact match required)")
    special = _special_value_mismatches(output, reference, chunk)
    if special:
        return Comparison(passed=False, mismatches=special[0], detail=f"{label}: {special[1]}")
    return _finite_comparison(output, reference, tolerance, label, chunk)


def _special_value_mismatches(output: torch.Tensor, reference: torch.Tensor, chunk: int) -> tuple[int, str] | None:
    lost_nan = spurious_nan = wrong_inf = 0
    for _, (out, ref) in _chunks((output, reference), chunk):
        ref_nan, out_nan = ref.isnan(), out.isnan()
        lost_nan += int((ref_nan & ~out_nan).sum().item())
        spurious_nan += int((out_nan & ~ref_nan).sum().item())
        wrong_inf += int(((ref.isinf() | out.isinf()) & (out != ref) & ~ref_nan).sum().item())
    if lost_nan:
        return lost_nan, f"{lost_nan} elements are NaN in the reference but not in the output (NaN must propagate)"
    if spurious_nan:
        return spurious_nan, f"{spurious_nan} elements are NaN in the output but finite or infinite in the reference"
    if wrong_inf:
        return wrong_inf, f"{wrong_inf} elements differ in infinities (reference +-Inf must be matched exactly)"
    return None


@dataclass
class _Worst:
    error: float = -1.0
    index: int = 0
    got: float = 0.0
    expected: float = 0.0


def _finite_comparison(output: torch.Tensor, reference: torch.Tensor, tolerance: Tolerance, label: str,
                       chunk: int) -> Comparison:
    finite_count, square_sum = 0, 0.0
    for _, (ref,) in _chunks((reference,), chunk):
        finite = ref[ref.isfinite()].double()
        finite_count += finite.numel()
        square_sum += float(finite.square().sum())
    if finite_count == 0:
        return Comparison(passed=True, detail=f"{label}: no finite reference elements; special values matched")
    atol = tolerance.atol + tolerance.atol_scale * max(math.sqrt(square_sum / finite_count), 1e-30)
    mismatches, error_square_sum, worst = 0, 0.0, _Worst()
    for start, (out, ref) in _chunks((output, reference), chunk):
        finite = ref.isfinite()
        error = torch.where(finite, (out.double() - ref.double()).abs(), 0.0)
        bound = (atol + tolerance.rtol * ref.double().abs()).clamp_min(tolerance.error_floor)
        mismatches += int((error > bound).sum().item())
        error_square_sum += float(error.square().sum())
        largest = int(error.argmax())
        if float(error[largest]) > worst.error:
            worst = _Worst(float(error[largest]), start + largest, float(out[largest]), float(ref[largest]))
    rel_l2 = math.sqrt(error_square_sum) / max(math.sqrt(square_sum), 1e-30)
    passed = mismatches == 0 and rel_l2 <= tolerance.max_rel_l2
    detail = (
        f"{label}: rel L2 error {rel_l2:.2e} (limit {tolerance.max_rel_l2:.0e}), "
        f"{mismatches} of {finite_count} elements outside tolerance; "
        f"worst at element {worst.index}: got {worst.got:.6g}, expected {worst.expected:.6g}"
    )
    return Comparison(passed=passed, detail=detail, rel_l2=rel_l2, mismatches=mismatches)


def is_weak_reference(reference: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> bool:
    """A near-zero or constant reference cannot tell a real kernel from one that writes a constant."""
    if reference.numel() <= 1:
        return True
    if not reference.dtype.is_floating_point:
        first = reference.reshape(-1)[0]
        return all(bool((part == first).all()) for _, (part,) in _chunks((reference,), chunk))
    count, mean, m2, largest = 0, 0.0, 0.0, 0.0
    for _, (part,) in _chunks((reference,), chunk):
        finite = part[part.isfinite()].double()
        if finite.numel() == 0:
            continue
        # Chan's merge of per-chunk mean and sum of squared deviations: no cancellation across chunks.
        n, chunk_mean = finite.numel(), float(finite.mean())
        chunk_m2 = float((finite - chunk_mean).square().sum())
        delta = chunk_mean - mean
        mean += delta * n / (count + n)
        m2 += chunk_m2 + delta * delta * count * n / (count + n)
        count += n
        largest = max(largest, float(finite.abs().max()))
    if count <= 1:
        return True
    return largest < 1e-6 or math.sqrt(m2 / count) <= 1e-6 * largest
