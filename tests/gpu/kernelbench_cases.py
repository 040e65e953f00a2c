"""Manifest of the hand-written kernels for KernelBench problems at their real sizes that the issue's false
rejections came from (tests/gpu/kernelbench_kernels/): honest ones the harness must accept, and cheating ones
(dropping NaN, skipping work) it must still reject, with the check that must be the first to fail.

Plain data, no tests: tests/gpu/test_honest_checks_gpu.py evaluates every kernel on a GPU, and
tests/cpu/test_kernelbench_kernels.py checks that each passes the source rules and compiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpu.cases import KERNELBENCH

KERNELS_DIR = Path(__file__).resolve().parent / "kernelbench_kernels"

GEMM_SUM = KERNELBENCH / "level2" / "14_Gemm_Divide_Sum_Scaling.py"
CONV_NORM = KERNELBENCH / "level2" / "17_Conv2d_InstanceNorm_Divide.py"
ATTENTION = KERNELBENCH / "level3" / "43_MinGPTCausalAttention.py"


@dataclass(frozen=True)
class KernelCase:
    """A kernel for a KernelBench problem; `rejected_by` is None for an honest one, else the first check to fail."""

    name: str
    problem: Path
    rejected_by: str | None
    description: str

    @property
    def kernel(self) -> Path:
        return KERNELS_DIR / f"{self.name}.cu"


HONEST: tuple[KernelCase, ...] = (
    KernelCase("gemm_divide_sum_rewrite", GEMM_SUM, None,
               "x times W's column sums: below the reference's compute floor, above the memory floor"),
    KernelCase("conv_instancenorm_divide", CONV_NORM, None,
               "direct fp32 convolution and two-pass InstanceNorm: ill-conditioned at inputs scaled by 1e-4"),
    KernelCase("causal_attention_skips_masked", ATTENTION, None,
               "query row s reads tokens 0..s only: finite rows where PyTorch's att @ v makes them NaN"),
)

CHEATING: tuple[KernelCase, ...] = (
    KernelCase("gemm_divide_sum_skips_rows", GEMM_SUM, "correct", "the rewrite, leaving out every 16th row of W"),
    KernelCase("conv_instancenorm_skips_channel", CONV_NORM, "correct", "the convolution skips the last input channel"),
    KernelCase("causal_attention_drops_nan", ATTENTION, "special_values",
               "the masked-work-skipping attention, with NaN that reached a row replaced by 0"),
)

ALL: tuple[KernelCase, ...] = HONEST + CHEATING
