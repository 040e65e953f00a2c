"""The machine record every result carries: gathered once per process, `none` for what the machine lacks,
the driver's version read the way the NVIDIA driver writes it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelblaster.harness import machine
from kernelblaster.harness.machine import Machine, driver_version, this_machine

PROPRIETARY = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
               "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Wed Feb 26 01:36:49 UTC 2025\n")


def test_the_record_is_gathered_once_per_process_and_gpu() -> None:
    assert this_machine(None) is this_machine(None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="specifies the record without a GPU")
def test_without_a_gpu_the_gpu_reads_none_and_torch_its_own_version() -> None:
    record = this_machine(0)
    assert (record.source, record.gpu, record.torch) == ("gathered", "none", torch.__version__)
    assert record.cuda_runtime == (torch.version.cuda or "none")


@pytest.mark.parametrize(("text", "version"), [(PROPRIETARY, "550.54.15"), (OPEN, "570.124.06")])
def test_the_driver_version_is_read_from_either_drivers_proc_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                   text: str, version: str) -> None:
    (tmp_path / "version").write_text(text)
    monkeypatch.setattr(machine, "DRIVER_FILE", tmp_path / "version")
    assert driver_version() == version


def test_without_a_driver_or_nvidia_smi_the_driver_reads_none(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.setattr(machine, "DRIVER_FILE", tmp_path / "absent")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert driver_version() == "none"


def test_without_nvcc_the_nvcc_version_reads_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KERNELBLASTER_NVCC", str(tmp_path / "no-nvcc"))
    assert machine._nvcc() == "none"


def test_a_test_double_says_so_in_its_line() -> None:
    double = Machine(source="test_double", gpu="H100", driver="1", cuda_runtime="2", nvcc="3", torch="4")
    assert double.line() == "H100 (test double), driver 1, CUDA runtime 2, nvcc 3, torch 4"
