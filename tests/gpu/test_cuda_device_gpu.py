"""The driver API's answers (harness/cuda_device.py) are PyTorch's, device by device, on a real GPU: the arch
candidates are compiled for and the GPU name results carry do not change with where they are read."""

from __future__ import annotations

import pytest
import torch

from kernelblaster.harness import cuda_device

pytestmark = pytest.mark.gpu


def test_every_visible_device_has_pytorchs_capability_and_name_through_the_driver_api() -> None:
    assert cuda_device._driver() is not None, "libcuda could not be loaded or initialised"
    for gpu in range(torch.cuda.device_count()):
        assert cuda_device.device_capability(gpu) == torch.cuda.get_device_capability(gpu)
        assert cuda_device.device_name(gpu) == torch.cuda.get_device_name(gpu)
