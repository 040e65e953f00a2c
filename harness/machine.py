"""The machine a result was measured on: the GPU, the NVIDIA driver, the CUDA runtime PyTorch loads, the nvcc
that builds candidates, and PyTorch. Times from different machines cannot be compared without it, so every
evaluation, run report and suite row carries one. Gathered once per process and GPU; each part that is missing
(no GPU, no driver, a CPU build of PyTorch, no nvcc) reads `none`.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, Field

from kernelblaster.harness.cuda_device import device_name
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.nvcc import find_nvcc, nvcc_version

NONE = "none"
DRIVER_FILE = Path("/proc/driver/nvidia/version")
# `gathered`: read in the process that made the result; `test_double`: a CPU test's stand-in.
MachineSource = Literal["gathered", "test_double"]
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ..." or "... Open Kernel Module for x86_64  570.124.06"
_DRIVER = re.compile(r"Kernel Module(?: for \S+)?\s+([0-9]+(?:\.[0-9]+)+)")
_NVCC = re.compile(r"release [0-9.]+, V([0-9.]+)")


class Machine(BaseModel):
    """Versions of what a measurement depended on; `none` where the machine has no such thing."""

    source: MachineSource = Field(description="Where the record comes from (see MachineSource)")
    gpu: str = Field(description="The GPU's name, e.g. NVIDIA H100 80GB HBM3; none without a GPU")
    driver: str = Field(description="The NVIDIA driver's version, e.g. 570.124.06; none without a driver")
    cuda_runtime: str = Field(description="The CUDA runtime PyTorch was built with and loads, e.g. 12.8; none for "
                                          "a CPU build of PyTorch")
    nvcc: str = Field(description="The version of the nvcc candidates are compiled with, e.g. 12.8.93; none when no "
                                  "nvcc is found")
    torch: str = Field(description="PyTorch's version, e.g. 2.13.0+cu128")

    def line(self) -> str:
        """One line for a report: `NVIDIA H100 80GB HBM3, driver 570.124.06, CUDA runtime 12.8, ...`."""
        double = " (test double)" if self.source == "test_double" else ""
        return (f"{self.gpu}{double}, driver {self.driver}, CUDA runtime {self.cuda_runtime}, nvcc {self.nvcc}, "
                f"torch {self.torch}")


@functools.cache
def this_machine(gpu: int | None) -> Machine:
    """The machine of this process, with GPU `gpu` (a device index; None: no GPU is used)."""
    return Machine(source="gathered", gpu=_gpu_name(gpu), driver=driver_version(),
                   cuda_runtime=torch.version.cuda or NONE, nvcc=_nvcc(), torch=torch.__version__)


def _gpu_name(gpu: int | None) -> str:
    if gpu is None or not torch.cuda.is_available():
        return NONE
    return device_name(gpu)  # through CUDA's driver: no CUDA start in this process for it


def driver_version() -> str:
    """The kernel module's version from /proc (no process started), else nvidia-smi's; none without either."""
    try:
        found = _DRIVER.search(DRIVER_FILE.read_text())
        if found:
            return found.group(1)
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return NONE
    try:
        done = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return NONE
    versions = done.stdout.split()
    return versions[0] if done.returncode == 0 and versions else NONE


def _nvcc() -> str:
    try:
        banner = nvcc_version(find_nvcc())
    except (UserFacingError, OSError):
        return NONE
    found = _NVCC.search(banner)
    return found.group(1) if found else NONE
