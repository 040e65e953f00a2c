"""Roofline floor of a problem on this GPU: compulsory bytes and FLOPs over the GPU's measured peaks.

Peaks are measured once per GPU model (a large device-to-device copy; large matrix products in fp32,
TF32 and fp16) and cached. Only compulsory bytes make a physical floor: a candidate faster than the memory floor
(every input and param read once, every output written once, at the measured bandwidth) is implausible:
`suspicious`. The compute floor counts the reference algorithm's FLOPs, which an algebraic rewrite need not do
(GEMM, divide, sum reduces to x times W's column sums): a candidate below it is not rejected but verified
further (`evaluate` runs more seeds and structured inputs), and the floor shown to agents stays the larger one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import torch
from pydantic import BaseModel

from kernelblaster.harness.precision import PrecisionPolicy, tf32_flags
from kernelblaster.harness.result import CheckResult, Roofline
from kernelblaster.harness.spec import ProblemSpec
from kernelblaster.tools.files import cached_measurement

# Measured peaks sit below the datasheet ceilings (about 90% of bandwidth); the floor uses peaks scaled by
# this headroom so that a kernel that merely beats our own measurement of cuBLAS is not called a cheat.
HEADROOM = 1.25
_COPY_BYTES = 1 << 30
_MATMUL_SIZE = 8192


class GpuPeaks(BaseModel):
    gpu_name: str
    bandwidth_gbs: float
    fp32_tflops: float
    tf32_tflops: float
    fp16_tflops: float
    measured_at: str

    def tflops_for(self, policy: PrecisionPolicy) -> float:
        """The fastest arithmetic a kernel passing the policy's check could use: under strict a 3xTF32 split
        (three TF32 products per fp32 product: a third of the TF32 peak, where that beats fp32 FFMA);
        KernelBench's 1e-2 tolerance (pytorch-default) lets fp16 tensor cores through on many problems, so it
        gets the fp16 peak."""
        return {"strict": max(self.fp32_tflops, self.tf32_tflops / 3), "tf32": self.tf32_tflops,
                "fp16": self.fp16_tflops, "pytorch-default": self.fp16_tflops}[policy]

    def arithmetic_for(self, policy: PrecisionPolicy) -> str:
        """Whose peak `tflops_for` gives, in words."""
        if policy == "strict":
            return "3xTF32, a third of TF32's" if self.tf32_tflops / 3 > self.fp32_tflops else "fp32 FFMA"
        return "TF32" if policy == "tf32" else "fp16 tensor cores"


def peaks_for_device(device: int, cache_dir: Path) -> GpuPeaks:
    name = torch.cuda.get_device_name(device)
    path = cache_dir / "peaks" / f"{re.sub(r'[^A-Za-z0-9]+', '_', name)}.json"
    return cached_measurement(path, GpuPeaks, lambda: measure_peaks(device))


def measure_peaks(device: int) -> GpuPeaks:
    with torch.cuda.device(device):
        return GpuPeaks(
            gpu_name=torch.cuda.get_device_name(device),
            bandwidth_gbs=_copy_bandwidth_gbs(),
            fp32_tflops=_matmul_tflops(torch.float32, allow_tf32=False),
            tf32_tflops=_matmul_tflops(torch.float32, allow_tf32=True),
            fp16_tflops=_matmul_tflops(torch.float16, allow_tf32=False),
            measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )


def _copy_bandwidth_gbs() -> float:
    """Device-to-device copy, counting bytes read plus bytes written."""
    source = torch.empty(_COPY_BYTES, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    return 2 * _COPY_BYTES / _median_ms(lambda: target.copy_(source)) / 1e6


def _matmul_tflops(dtype: torch.dtype, allow_tf32: bool) -> float:
    with tf32_flags(allow_tf32, False):
        a = torch.randn(_MATMUL_SIZE, _MATMUL_SIZE, device="cuda", dtype=dtype)
        b = torch.randn(_MATMUL_SIZE, _MATMUL_SIZE, device="cuda", dtype=dtype)
        milliseconds = _median_ms(lambda: a @ b)
    return 2 * _MATMUL_SIZE**3 / milliseconds / 1e9


def _median_ms(operation: Callable[[], object], repeats: int = 10) -> float:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        operation()
    samples: list[float] = []
    for _ in range(repeats):
        start.record()
        operation()
        stop.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(stop))
    return sorted(samples)[len(samples) // 2]


def roofline_for(spec: ProblemSpec, flops: int, peaks: GpuPeaks, policy: PrecisionPolicy) -> Roofline:
    memory_ms = spec.compulsory_bytes / (peaks.bandwidth_gbs * HEADROOM * 1e6)
    compute_ms = flops / (peaks.tflops_for(policy) * HEADROOM * 1e9)
    return Roofline(
        compulsory_bytes=spec.compulsory_bytes,
        flops=flops,
        peak_bandwidth_gbs=peaks.bandwidth_gbs,
        peak_tflops=peaks.tflops_for(policy),
        peak_arithmetic=peaks.arithmetic_for(policy),
        floor_ms=max(memory_ms, compute_ms),
        limited_by="memory" if memory_ms >= compute_ms else "compute",
        memory_floor_ms=memory_ms,
        compute_floor_ms=compute_ms,
    )


def below_compute_floor(roofline: Roofline, time_ms: float) -> bool:
    """Faster than the reference algorithm's FLOPs allow, yet not below the memory floor: the candidate does less
    arithmetic than the reference (an algebraic rewrite, or skipped work), so it earns more verification."""
    return roofline.compute_floor_ms is not None and roofline.physical_floor_ms <= time_ms < roofline.compute_floor_ms


def roofline_check(roofline: Roofline, time_ms: float) -> tuple[Roofline, CheckResult]:
    """`suspicious` only below the memory floor; below the compute floor alone the check passes, saying so."""
    fraction = roofline.floor_ms / time_ms if time_ms > 0 else float("inf")
    measured = roofline.model_copy(update={"fraction_of_floor": fraction})
    floor = roofline.physical_floor_ms
    below = time_ms < floor
    if below:
        detail = (f"{time_ms * 1000:.1f} us is below the memory floor of {floor * 1000:.1f} us (compulsory bytes "
                  "over the GPU's measured bandwidth with headroom): physically implausible, not rewarded")
    elif below_compute_floor(roofline, time_ms):
        assert roofline.compute_floor_ms is not None
        detail = (f"{time_ms * 1000:.1f} us is below the reference algorithm's compute floor of "
                  f"{roofline.compute_floor_ms * 1000:.1f} us (its FLOPs at the GPU's peak) but above the memory floor "
                  f"({floor * 1000:.1f} us): it does less arithmetic than the reference (an algebraic rewrite), "
                  "so it was verified on more seeds and structured inputs")
    else:
        detail = f"{fraction * 100:.0f}% of the {roofline.limited_by}-bound floor ({roofline.floor_ms * 1000:.1f} us)"
    return measured, CheckResult(name="roofline", passed=not below, detail=detail)
