"""A GPU's compute capability and name through CUDA's driver API (harness/cuda_device.py), with PyTorch's answer
where the driver API gives none; on CPU against a stand-in for libcuda that answers as the real one does."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest
import torch

from kernelblaster.harness import cuda_device
from kernelblaster.harness.cuda_device import COMPUTE_CAPABILITY_MAJOR, COMPUTE_CAPABILITY_MINOR, CUDA_SUCCESS
from kernelblaster.harness.evaluate import detect_arch

CUDA_ERROR_INVALID_DEVICE = 101


class FakeLibcuda:
    """libcuda's three calls used, over `devices` (ordinal -> (name, major, minor))."""

    def __init__(self, devices: dict[int, tuple[str, int, int]]) -> None:
        self.devices = devices

    def cuDeviceGet(self, device: Any, ordinal: int) -> int:  # CUDA's own names
        if ordinal not in self.devices:
            return CUDA_ERROR_INVALID_DEVICE
        device._obj.value = ordinal
        return CUDA_SUCCESS

    def cuDeviceGetAttribute(self, value: Any, attribute: int, device: ctypes.c_int) -> int:
        _, major, minor = self.devices[device.value]
        value._obj.value = {COMPUTE_CAPABILITY_MAJOR: major, COMPUTE_CAPABILITY_MINOR: minor}[attribute]
        return CUDA_SUCCESS

    def cuDeviceGetName(self, buffer: Any, size: int, device: ctypes.c_int) -> int:
        buffer.value = self.devices[device.value][0].encode()[:size - 1]
        return CUDA_SUCCESS


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    library = FakeLibcuda({0: ("NVIDIA H100 80GB HBM3", 9, 0), 1: ("NVIDIA B200", 10, 0)})
    monkeypatch.setattr(cuda_device, "_driver", lambda: library)


def test_the_capability_and_name_of_each_device_come_from_the_driver_api(two_gpus: None) -> None:
    assert cuda_device.device_capability(1) == (10, 0)
    assert cuda_device.device_name(0) == "NVIDIA H100 80GB HBM3"


def test_the_arch_to_compile_for_comes_from_the_driver_api(two_gpus: None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert detect_arch(0) == "sm_90"


def test_a_device_the_driver_api_does_not_know_is_asked_of_pytorch(two_gpus: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda gpu: (8, 9))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda gpu: "NVIDIA L4")
    assert (cuda_device.device_capability(5), cuda_device.device_name(5)) == ((8, 9), "NVIDIA L4")


def test_without_libcuda_pytorch_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_device, "_driver", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda gpu: (9, 0))
    assert cuda_device.device_capability(0) == (9, 0)
