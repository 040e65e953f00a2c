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

from kernelblaster.harness.cuda_device import device_attributes, driver_version
from kernelblaster.harness.precision import TENSOR_CORE_OPERANDS, PrecisionPolicy
from kernelblaster.harness.roofline import peaks_for_device
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.nvcc import compile_flags, compile_target, find_nvcc, nvcc_version, uses_fast_math

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


class CapabilityFacts(BaseModel):
    """What a kernel can organise on this GPU beyond one block: clusters, grid-wide sync, and the toolkit."""

    clusters: bool = Field(description="Thread-block clusters (cudaLaunchKernelEx with a cluster dimension, sm_90+)")
    portable_cluster_size: int = Field(description="Blocks per cluster any sm_90 GPU runs (8); larger needs "
                                                   "cudaFuncAttributeNonPortableClusterSizeAllowed")
    distributed_shared_memory: bool = Field(description="A cluster's blocks reach each other's shared memory")
    cooperative_launch: bool = Field(description="cudaLaunchCooperativeKernel, so grid-wide sync, is supported")
    max_blocks_per_sm: int | None = Field(description="Resident blocks per SM at most; None where not known")
    cuda_toolkit: str | None = Field(description="The nvcc release candidates are compiled with, e.g. 13.0.88")
    driver: str | None = Field(default=None, description="The CUDA version the driver supports, e.g. 13.0")


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
    capabilities: CapabilityFacts | None = None  # None in facts gathered before they were kept


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


# CUdevice_attribute values (cuda.h).
_COOPERATIVE_LAUNCH, _MAX_BLOCKS_PER_SM, _CLUSTER_LAUNCH = 95, 106, 120
PORTABLE_CLUSTER_SIZE = 8
# Resident blocks per SM by compute capability (CUDA programming guide, "Compute capabilities" table).
_BLOCKS_PER_SM = {70: 32, 75: 16, 80: 32, 86: 16, 87: 16, 89: 24, 90: 32, 100: 32, 120: 32}


def capability_facts(arch: str) -> CapabilityFacts:
    """The capabilities sm_XX has by the programming guide (no GPU asked); the toolkit is the local nvcc's."""
    capability = compute_capability(arch)
    return CapabilityFacts(clusters=capability >= 90, portable_cluster_size=PORTABLE_CLUSTER_SIZE if capability >= 90
                           else 1, distributed_shared_memory=capability >= 90, cooperative_launch=capability >= 60,
                           max_blocks_per_sm=_BLOCKS_PER_SM.get(capability), cuda_toolkit=toolkit_release())


def read_capabilities(device: int, arch: str) -> CapabilityFacts:
    """The capabilities GPU `device` reports (cuDeviceGetAttribute through the driver library); what it cannot
    report comes from its arch."""
    by_arch = capability_facts(arch)
    attributes = device_attributes(device, (_COOPERATIVE_LAUNCH, _MAX_BLOCKS_PER_SM, _CLUSTER_LAUNCH))
    if attributes is None:
        return by_arch
    cooperative, blocks, clusters = attributes
    return by_arch.model_copy(update={
        "clusters": bool(clusters), "distributed_shared_memory": bool(clusters),
        "portable_cluster_size": PORTABLE_CLUSTER_SIZE if clusters else 1, "cooperative_launch": bool(cooperative),
        "max_blocks_per_sm": blocks, "driver": driver_version()})


def toolkit_release() -> str | None:
    """The local nvcc's release (13.0.88), or None where there is no nvcc."""
    try:
        found = re.search(r"release [\d.]+, V([\d.]+)", nvcc_version(find_nvcc()))
    except UserFacingError:
        return None
    return found[1] if found else None


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
        capabilities=read_capabilities(device, arch),
    )
