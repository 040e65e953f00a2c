"""A GPU's name, compute capability and other attributes, and the driver's version, read through CUDA's driver
API (libcuda), which needs neither a CUDA context nor PyTorch's CUDA start: an evaluation knows the arch to
compile for while PyTorch starts CUDA in the background. Where the driver API cannot answer (no libcuda, an
error), PyTorch's own answer is used for the name and capability.

Device numbers are the same in both: CUDA's runtime (PyTorch) numbers devices as the driver does, after
CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import torch

CUDA_SUCCESS = 0
# CUdevice_attribute values (cuda.h)
COMPUTE_CAPABILITY_MAJOR = 75
COMPUTE_CAPABILITY_MINOR = 76
NAME_BYTES = 256


@cache
def _library() -> Any:
    """libcuda, loaded; None where it cannot be."""
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


@cache
def _driver() -> Any:
    """libcuda, initialised; None where it cannot be loaded or initialised."""
    library = _library()
    return library if library is not None and library.cuInit(0) == CUDA_SUCCESS else None


def _device(library: Any, gpu: int) -> ctypes.c_int | None:
    device = ctypes.c_int()
    return device if library.cuDeviceGet(ctypes.byref(device), gpu) == CUDA_SUCCESS else None


def device_attributes(gpu: int, attributes: tuple[int, ...]) -> list[int] | None:
    """The values of `attributes` (CUdevice_attribute numbers) of CUDA device `gpu`; None where the driver API
    cannot answer every one."""
    library = _driver()
    device = None if library is None else _device(library, gpu)
    if device is None:
        return None
    values = []
    for attribute in attributes:
        value = ctypes.c_int()
        if library.cuDeviceGetAttribute(ctypes.byref(value), attribute, device) != CUDA_SUCCESS:
            return None
        values.append(value.value)
    return values


def device_capability(gpu: int) -> tuple[int, int]:
    """The compute capability (major, minor) of CUDA device `gpu`."""
    numbers = device_attributes(gpu, (COMPUTE_CAPABILITY_MAJOR, COMPUTE_CAPABILITY_MINOR))
    return (numbers[0], numbers[1]) if numbers is not None else torch.cuda.get_device_capability(gpu)


def driver_version() -> str | None:
    """The CUDA version the installed driver supports ("13.0"); None without libcuda. Needs no initialisation."""
    library = _library()
    version = ctypes.c_int()
    if library is None or library.cuDriverGetVersion(ctypes.byref(version)) != CUDA_SUCCESS:
        return None
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


def device_name(gpu: int) -> str:
    """The name of CUDA device `gpu` ("NVIDIA H100 80GB HBM3"), as PyTorch spells it."""
    library = _driver()
    device = None if library is None else _device(library, gpu)
    if device is not None:
        name = ctypes.create_string_buffer(NAME_BYTES)
        if library.cuDeviceGetName(name, NAME_BYTES, device) == CUDA_SUCCESS:
            return name.value.decode(errors="replace")
    return torch.cuda.get_device_name(gpu)
