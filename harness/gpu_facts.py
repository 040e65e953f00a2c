"""What the agents are told about the GPU they write for: its limits, its measured peaks, how candidates are
compiled for it, and which asynchronous-copy and matrix instructions they may use under the run's precision
policy. Gathered once per run (the `setup` node asks the evaluator); `source` says where the facts come from.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, Field

from kernelblaster.harness.precision import TENSOR_CORE_OPERANDS, PrecisionPolicy
from kernelblaster.harness.roofline import peaks_for_device
from kernelblaster.tools.nvcc import compile_flags, compile_target, uses_fast_math

# `device`: read from this GPU by PyTorch, peaks measured on it; `test_double`: a CPU test's stand-in;
# `datasheet`: published figures of a GPU model (benchmarks of the prompts), nothing measured.
FactsSource = Literal["device", "test_double", "datasheet"]


class CompilerFacts(BaseModel):
    """How candidates are compiled for the GPU."""

    target: str = Field(description="The real architecture candidates are built for, e.g. sm_90a")
    nvcc_flags: list[str] = Field(description="The flags every candidate is compiled with")
    fast_math: bool = Field(description="Whether the flags turn on --use_fast_math")


class InstructionFacts(BaseModel):
    """The asynchronous-copy and matrix instructions a candidate may use, by arch and precision policy."""

    cp_async: bool = Field(description="cp.async (global to shared without registers, sm_80+) is available")
    tma: bool = Field(description="The Tensor Memory Accelerator (cp.async.bulk, sm_90+) is available")
    wgmma: bool = Field(description="Warpgroup MMA (wgmma.mma_async, sm_90a only) is available")
    tensor_core_operands: list[str] = Field(description="Tensor-core operand types the precision policy lets "
                                                        "through (none under strict: 3xTF32 splitting only)")


class GpuFacts(BaseModel):
    """One GPU as the agents see it; sizes in bytes, bandwidth in GB/s, throughput in TFLOP/s."""

    source: FactsSource = Field(description="Where the facts come from (see FactsSource)")
    name: str = Field(description="The GPU's name, e.g. NVIDIA H100 80GB HBM3")
    arch: str = Field(description="Its architecture as the harness names it, e.g. sm_90")
    sm_count: int
    max_threads_per_sm: int
    shared_memory_per_sm: int
    shared_memory_per_block: int = Field(description="Without opting in (cudaFuncSetAttribute)")
    shared_memory_per_block_optin: int | None = Field(description="The most a block may opt in to; None when "
                                                                  "PyTorch does not report it")
    registers_per_sm: int | None = Field(description="32-bit registers per SM; None when PyTorch does not report it")
    l2_cache: int
    memory: int
    bandwidth_gbs: float = Field(description="Measured device-to-device copy bandwidth (read plus write)")
    fp32_tflops: float = Field(description="Measured fp32 matrix-product peak without tensor cores")
    tf32_tflops: float
    fp16_tflops: float
    compiler: CompilerFacts
    instructions: InstructionFacts


def compute_capability(arch: str) -> int:
    """90 for sm_90 or sm_90a."""
    found = re.fullmatch(r"sm_(\d+)[af]?", arch)
    if found is None:
        raise ValueError(f"not a GPU arch: {arch!r}")
    return int(found[1])


def instruction_facts(arch: str, policy: PrecisionPolicy) -> InstructionFacts:
    capability = compute_capability(arch)
    return InstructionFacts(cp_async=capability >= 80, tma=capability >= 90, wgmma=capability == 90,
                            tensor_core_operands=list(TENSOR_CORE_OPERANDS[policy]))


def compiler_facts(arch: str) -> CompilerFacts:
    flags = compile_flags(arch)
    return CompilerFacts(target=compile_target(arch), nvcc_flags=flags, fast_math=uses_fast_math(flags))


def read_gpu_facts(device: int, arch: str, policy: PrecisionPolicy, cache_dir: Path) -> GpuFacts:
    """The facts of GPU `device`, read from it (its peaks are measured once per GPU model and cached)."""
    properties = torch.cuda.get_device_properties(device)
    peaks = peaks_for_device(device, cache_dir)
    return GpuFacts(
        source="device", name=properties.name, arch=arch, sm_count=properties.multi_processor_count,
        max_threads_per_sm=properties.max_threads_per_multi_processor,
        shared_memory_per_sm=properties.shared_memory_per_multiprocessor,
        shared_memory_per_block=properties.shared_memory_per_block,
        # Both are missing from some PyTorch builds' device properties.
        shared_memory_per_block_optin=getattr(properties, "shared_memory_per_block_optin", None),
        registers_per_sm=getattr(properties, "regs_per_multiprocessor", None),
        l2_cache=properties.L2_cache_size, memory=properties.total_memory, bandwidth_gbs=peaks.bandwidth_gbs,
        fp32_tflops=peaks.fp32_tflops, tf32_tflops=peaks.tf32_tflops, fp16_tflops=peaks.fp16_tflops,
        compiler=compiler_facts(arch), instructions=instruction_facts(arch, policy),
    )
