"""On a GPU machine, every result names it: the GPU, the driver, the CUDA runtime, nvcc and torch."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
from gpu.cases import EXAMPLES, SWISH

from kernelblaster.harness.evaluate import EvalOptions, evaluate_candidate
from kernelblaster.harness.machine import this_machine

pytestmark = pytest.mark.gpu


def test_an_evaluation_names_the_gpu_driver_cuda_runtime_nvcc_and_torch_it_ran_with(cache_dir: Path) -> None:
    result = evaluate_candidate(SWISH, EXAMPLES[0].naive, EvalOptions(cache_dir=cache_dir, baseline=False))
    machine = result.machine
    assert machine is not None and machine.source == "gathered"
    assert machine.gpu == result.gpu == torch.cuda.get_device_name(0)
    assert machine.cuda_runtime == torch.version.cuda and machine.torch == torch.__version__
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                         text=True, check=True).stdout.split()
    assert machine.driver == smi[0]
    assert re.fullmatch(r"\d+\.\d+\.\d+", machine.nvcc)
    assert this_machine(0) is this_machine(0)
