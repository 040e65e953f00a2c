"""A GPU's name and compute capability read through CUDA's driver API (libcuda), which needs neither a CUDA
context nor PyTorch's CUDA start: an evaluation knows the arch to compile for while PyTorch starts CUDA in the
background. Where the driver API cannot answer (no libcuda, an error), PyTorch's own answer is used.

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
def _driver() -> Any:
    """libcuda, initialised; None where it cannot be loaded or initialised."""
    try:
        library = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return library if library.cuInit(0) == CUDA_SUCCESS else None


def _device(library: Any, gpu: int) -> ctypes.c_int | None:
    device = ctypes.c_int()
    return device if library.cuDeviceGet(ctypes.byref(device), gpu) == CUDA_SUCCESS else None


def device_capability(gpu: int) -> tuple[int, int]:
    """The compute capability (major, minor) of CUDA device `gpu`."""
    library = _driver()
    device = None if library is None else _device(library, gpu)
    if device is not None:
        numbers = ctypes.c_int(), ctypes.c_int()
        if all(library.cuDeviceGetAttribute(ctypes.byref(number), attribute, device) == CUDA_SUCCESS
               for number, attribute in zip(numbers, (COMPUTE_CAPABILITY_MAJOR, COMPUTE_CAPABILITY_MINOR),
                                            strict=True)):
            return numbers[0].value, numbers[1].value
    return torch.cuda.get_device_capability(gpu)


def device_name(gpu: int) -> str:
    """The name of CUDA device `gpu` ("NVIDIA H100 80GB HBM3"), as PyTorch spells it."""
    library = _driver()
    device = None if library is None else _device(library, gpu)
    if device is not None:
        name = ctypes.create_string_buffer(NAME_BYTES)
        if library.cuDeviceGetName(name, NAME_BYTES, device) == CUDA_SUCCESS:
            return name.value.decode(errors="replace")
    return torch.cuda.get_device_name(gpu)
