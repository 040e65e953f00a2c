"""Time the PyTorch baselines of a problem, eager and `torch.compile`, by the harness's timing method.

Results are cached per (problem source, GPU, precision policy, torch version): the baseline of a problem
does not change while an optimisation run evaluates hundreds of candidates against it.
"""

from __future__ import annotations

import functools
import re
import warnings
from pathlib import Path

import torch

from kernelblaster.harness.precision import PrecisionPolicy, torch_precision
from kernelblaster.harness.problem import Problem, instantiate, make_inputs
from kernelblaster.harness.result import BaselineTiming
from kernelblaster.harness.timing import time_torch_calls
from kernelblaster.tools.files import cached_measurement


def baseline_for(problem: Problem, device: int, policy: PrecisionPolicy, rotating_sets: int,
                 cache_dir: Path, with_compile: bool = True, remeasure: bool = False) -> BaselineTiming:
    return cached_measurement(_cache_path(problem, device, policy, with_compile, cache_dir), BaselineTiming,
                              lambda: measure_baseline(problem, device, policy, rotating_sets, with_compile),
                              remeasure=remeasure)


def measure_baseline(problem: Problem, device: int, policy: PrecisionPolicy, rotating_sets: int,
                     with_compile: bool = True) -> BaselineTiming:
    # One model, several input sets: torch.compile guards on the module, so one compiled model serves all sets.
    model_instance = instantiate(problem, 0, f"cuda:{device}")
    arg_sets = [model_instance.args] + [make_inputs(problem, seed, f"cuda:{device}") for seed in
                                        range(1, rotating_sets)]
    with torch_precision(policy):
        eager = time_torch_calls([functools.partial(model_instance.model, *args) for args in arg_sets], device)
        compiled, error = None, None
        if with_compile:
            try:
                compiled_model = torch.compile(model_instance.model)
                with warnings.catch_warnings():
                    # Inductor advises enabling TF32 once per process; the precision policy decides that, and a
                    # suite's baseline prints it once per problem.
                    warnings.filterwarnings("ignore", "TensorFloat32 tensor cores", UserWarning)
                    compiled = time_torch_calls([functools.partial(compiled_model, *args) for args in arg_sets],
                                                device)
            except Exception as failure:  # torch.compile failing on a model is a fact to report, not a crash
                error = f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
    return BaselineTiming(eager=eager, compiled=compiled, compile_error=error, precision=policy,
                          rotating_sets=rotating_sets)


def _cache_path(problem: Problem, device: int, policy: str, with_compile: bool, cache_dir: Path) -> Path:
    gpu = re.sub(r"[^A-Za-z0-9]+", "_", torch.cuda.get_device_name(device))
    torch_version = re.sub(r"[^A-Za-z0-9.]+", "_", torch.__version__)
    variant = "eager+compile" if with_compile else "eager"
    return cache_dir / "baselines" / f"{problem.sha256[:16]}-{gpu}-{policy}-{variant}-torch{torch_version}.json"
