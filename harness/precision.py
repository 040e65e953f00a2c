"""Precision policies and the tolerances they imply for each output dtype.

`strict` (the default) demands fp32 accuracy, so a candidate cannot win by quietly using TF32 or fp16
tensor cores. `tf32` and `fp16` must be asked for, and then the PyTorch baseline gets the same freedom
(TF32 matmuls / autocast), so the speedup stays a like-for-like comparison. `pytorch-default` is
KernelBench's protocol: the baseline runs with PyTorch's default backend flags (TF32 in cuDNN
convolutions, none in matmuls) and fp32 outputs are checked as KernelBench checks them,
allclose with atol = rtol = 1e-2, so a speedup can stand beside published KernelBench numbers.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import torch
from pydantic import BaseModel

# The names are the KB's (kb.precision: importable without torch); what each allows is said here.
from kernelblaster.kb.precision import PRECISION_POLICIES as PRECISION_POLICIES
from kernelblaster.kb.precision import PrecisionPolicy as PrecisionPolicy


class Tolerance(BaseModel):
    """Elementwise |out-ref| <= max(atol + atol_scale*rms(ref) + rtol*|ref|, error_floor), and a global rel-L2
    bound. `error_floor` is zero for a policy's own bound; `conditioning.widen` raises it (and max_rel_l2) to
    cover a kernel as accurate as PyTorch where the case itself is ill-conditioned."""

    rtol: float
    atol_scale: float
    max_rel_l2: float
    atol: float = 0.0
    exact: bool = False
    error_floor: float = 0.0


_EXACT = Tolerance(rtol=0.0, atol_scale=0.0, max_rel_l2=0.0, exact=True)
# fp32 dot products of a few thousand terms land near 1e-6 relative L2; TF32 near 3e-4 (8e-4 when the inputs are
# truncated rather than rounded); so 1e-4 separates them. TF32 keeps fp16's 10 mantissa bits, and its largest
# elementwise errors in a million-element GEMM reach about 5e-3 of the output's rms: its atol is fp16's.
_FLOAT32 = {
    "strict": Tolerance(rtol=1e-3, atol_scale=1e-4, max_rel_l2=1e-4),
    "tf32": Tolerance(rtol=1e-2, atol_scale=1e-2, max_rel_l2=2e-3),
    "fp16": Tolerance(rtol=2e-2, atol_scale=1e-2, max_rel_l2=1e-2),
    "pytorch-default": Tolerance(rtol=1e-2, atol_scale=0.0, max_rel_l2=math.inf, atol=1e-2),
}
_HALF = {
    torch.float16: Tolerance(rtol=1e-2, atol_scale=1e-2, max_rel_l2=1e-2),
    torch.bfloat16: Tolerance(rtol=2e-2, atol_scale=2e-2, max_rel_l2=2e-2),
}


def tolerance_for(dtype: torch.dtype, policy: PrecisionPolicy) -> Tolerance:
    if not dtype.is_floating_point:
        return _EXACT
    if dtype == torch.float64:
        return Tolerance(rtol=1e-7, atol_scale=1e-9, max_rel_l2=1e-9)
    if dtype == torch.float32:
        return _FLOAT32[policy]
    return _HALF.get(dtype, _HALF[torch.bfloat16])


# Tensor-core operand types whose products pass each policy's fp32 check (fp16/bf16 operands only fp16's; under
# strict only a 3xTF32 split, whose operands are fp32 split in two, keeps the error near plain fp32).
TENSOR_CORE_OPERANDS: dict[PrecisionPolicy, tuple[str, ...]] = {
    "strict": (), "tf32": ("tf32",), "fp16": ("tf32", "fp16", "bf16"), "pytorch-default": ("tf32",),
}

# (matmul, cuDNN) TF32 flags per policy; pytorch-default sets PyTorch's own defaults, whatever the process changed.
_TF32_FLAGS: dict[PrecisionPolicy, tuple[bool, bool]] = {
    "strict": (False, False), "tf32": (True, True), "fp16": (True, True), "pytorch-default": (False, True),
}


class _SharedFlags:
    """PyTorch's TF32 flags are process-wide, and the threads of one process (one per GPU of a run; the
    references computed in the background) each need their own while they compute: a strict reference
    computed while another thread's TF32 baseline or peak measurement had the flags on would fail honest
    kernels. Regions that want the same flags run together; one that wants others waits until none is left
    (and, waiting, keeps new ones of the old flags out). A thread that enters a region of other flags from
    inside one would wait for itself: that is a programming error, raised."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._flags: tuple[bool, bool] | None = None
        self._saved = (False, False)
        self._depth: dict[int, int] = {}  # thread -> how deep in regions it is
        self._waiting = 0  # threads waiting for other flags than the current ones

    @contextmanager
    def held(self, flags: tuple[bool, bool]) -> Iterator[None]:
        me = threading.get_ident()
        with self._changed:
            self._enter(me, flags)
        try:
            yield
        finally:
            with self._changed:
                self._leave(me)

    def _enter(self, me: int, flags: tuple[bool, bool]) -> None:
        if me in self._depth:
            if flags != self._flags:
                raise RuntimeError(f"a region of TF32 flags {flags} inside one of {self._flags} in the same thread")
        else:
            other = self._flags is not None and flags != self._flags
            self._waiting += other
            self._changed.wait_for(lambda: not self._depth or (flags == self._flags and not self._waiting))
            self._waiting -= other
        if not self._depth:
            self._saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
            self._flags = flags
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
        self._depth[me] = self._depth.get(me, 0) + 1

    def _leave(self, me: int) -> None:
        self._depth[me] -= 1
        if not self._depth[me]:
            del self._depth[me]
        if not self._depth:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self._saved
            self._flags = None
            self._changed.notify_all()


_FLAGS = _SharedFlags()


def tf32_flags(matmul: bool, cudnn: bool) -> AbstractContextManager[None]:
    """A region in which PyTorch's (matmul, cuDNN) TF32 flags are these, whatever other threads want."""
    return _FLAGS.held((matmul, cudnn))


@contextmanager
def torch_precision(policy: PrecisionPolicy) -> Iterator[None]:
    """Run PyTorch with exactly the freedom the candidate was given, then restore the global flags."""
    with tf32_flags(*_TF32_FLAGS[policy]):
        if policy == "fp16":
            with torch.autocast("cuda", dtype=torch.float16):
                yield
        else:
            yield
