"""Compare a candidate's output with the reference: allclose and relative L2, NaN/Inf-aware, plus poison.

Where the reference is NaN the candidate must be NaN; where it is +-Inf the candidate must match exactly;
everywhere else both the elementwise bound and the global relative-L2 bound must hold.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel

from kernelblaster.harness.precision import Tolerance

POISON_BYTE = 0xFF  # all-ones bytes: NaN in every float format, -1 in integers, so unwritten elements stand out


class Comparison(BaseModel):
    passed: bool
    detail: str
    rel_l2: float = 0.0
    mismatches: int = 0


def as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 tensor (flattened first: a 0-d tensor has no byte view)."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def unwritten_elements(output: torch.Tensor) -> int:
    """Elements whose every byte still holds the poison pattern written before the call."""
    if output.numel() == 0:
        return 0
    raw = as_bytes(output).reshape(output.numel(), output.element_size())
    return int((raw == POISON_BYTE).all(dim=1).sum().item())


def compare_output(output: torch.Tensor, reference: torch.Tensor, tolerance: Tolerance, label: str) -> Comparison:
    if output.shape != reference.shape or output.dtype != reference.dtype:
        return Comparison(passed=False, detail=f"{label}: got {output.dtype}{list(output.shape)}, "
                          f"expected {reference.dtype}{list(reference.shape)}")
    if tolerance.exact:
        mismatches = int((output != reference).sum().item())
        return Comparison(passed=mismatches == 0, mismatches=mismatches,
                          detail=f"{label}: {mismatches} of {output.numel()} elements differ (exact match required)")
    out, ref = output.double(), reference.double()
    special = _special_value_mismatches(out, ref)
    if special:
        return Comparison(passed=False, mismatches=special[0], detail=f"{label}: {special[1]}")
    return _finite_comparison(out, ref, tolerance, label)


def _special_value_mismatches(out: torch.Tensor, ref: torch.Tensor) -> tuple[int, str] | None:
    ref_nan, out_nan = ref.isnan(), out.isnan()
    lost_nan = int((ref_nan & ~out_nan).sum().item())
    if lost_nan:
        return lost_nan, f"{lost_nan} elements are NaN in the reference but not in the output (NaN must propagate)"
    spurious = int((out_nan & ~ref_nan).sum().item())
    if spurious:
        return spurious, f"{spurious} elements are NaN in the output but finite or infinite in the reference"
    ref_inf = ref.isinf()
    wrong_inf = int(((ref_inf | out.isinf()) & (out != ref)).sum().item())
    if wrong_inf:
        return wrong_inf, f"{wrong_inf} elements differ in infinities (reference +-Inf must be matched exactly)"
    return None


def _finite_comparison(out: torch.Tensor, ref: torch.Tensor, tolerance: Tolerance, label: str) -> Comparison:
    finite = ref.isfinite()
    out_f, ref_f = out[finite], ref[finite]
    if ref_f.numel() == 0:
        return Comparison(passed=True, detail=f"{label}: no finite reference elements; special values matched")
    rms = float(ref_f.square().mean().sqrt())
    atol = tolerance.atol_scale * max(rms, 1e-30)
    error = (out_f - ref_f).abs()
    bad = error > atol + tolerance.rtol * ref_f.abs()
    mismatches = int(bad.sum().item())
    ref_norm = float(ref_f.norm())
    rel_l2 = float((out_f - ref_f).norm()) / max(ref_norm, 1e-30)
    passed = mismatches == 0 and rel_l2 <= tolerance.max_rel_l2
    worst = int(error.argmax())
    detail = (
        f"{label}: rel L2 error {rel_l2:.2e} (limit {tolerance.max_rel_l2:.0e}), "
        f"{mismatches} of {ref_f.numel()} elements outside tolerance; "
        f"worst at finite index {worst}: got {float(out_f[worst]):.6g}, expected {float(ref_f[worst]):.6g}"
    )
    return Comparison(passed=passed, detail=detail, rel_l2=rel_l2, mismatches=mismatches)


def is_weak_reference(reference: torch.Tensor) -> bool:
    """A near-zero or constant reference cannot tell a real kernel from one that writes a constant."""
    if not reference.dtype.is_floating_point:
        return bool(reference.numel() <= 1 or (reference == reference.flatten()[0]).all())
    finite = reference[reference.isfinite()].double()
    if finite.numel() <= 1:
        return True
    scale = float(finite.abs().max())
    return scale < 1e-6 or float(finite.std()) <= 1e-6 * scale
