"""Time the PyTorch baselines of a problem, eager and `torch.compile`, by the harness's timing method.

Results are cached per (problem source, GPU, precision policy, torch version): the baseline of a problem
does not change while an optimisation run evaluates hundreds of candidates against it. A cached figure is
checked against a quick timing when it is read, once per evaluator.
"""

from __future__ import annotations

import functools
import re
import warnings
from pathlib import Path

import torch

from kernelblaster.harness.precision import PrecisionPolicy, torch_precision
from kernelblaster.harness.problem import Problem, ProblemInstance, instantiate, make_inputs
from kernelblaster.harness.result import BaselineTiming
from kernelblaster.harness.timing import IterationPlan, time_torch_calls
from kernelblaster.tools.files import cached_measurement, read_measurement

# A cached eager time this much above a quick timing now is measured again. At c761bb5 fifty level-2 figures
# measured on shared GPUs came out up to 2x slow and were served from the cache after.
STALE_MARGIN = 1.10
QUICK_PLAN = IterationPlan(warmup=3, iterations=10)


def baseline_for(problem: Problem, device: int, policy: PrecisionPolicy, rotating_sets: int,
                 cache_dir: Path, with_compile: bool = True, remeasure: bool = False) -> BaselineTiming:
    """The problem's baselines from the cache, unless `remeasure` or the quick timing taken with the cached
    figure is slower than one now (it came from a busy GPU, and would flatter every kernel compared with it):
    then timed. Only eager is checked; torch.compile's figure was taken in the same conditions."""
    path = _cache_path(problem, device, policy, with_compile, cache_dir)
    cached = None if remeasure else read_measurement(path, BaselineTiming)
    if cached is not None:
        then_ms = cached.quick_eager_ms or cached.eager.median_ms  # entries cached before the quick figure
        if not stale(then_ms, quick_eager_ms(problem, device, policy)):
            return cached
    return cached_measurement(path, BaselineTiming,
                              lambda: measure_baseline(problem, device, policy, rotating_sets, with_compile),
                              remeasure=True)


def stale(then_ms: float, now_ms: float) -> bool:
    """A quick eager time then more than `STALE_MARGIN` above the same timing now. The other way round (faster
    then) is kept: a GPU busy now would make a new figure wrong instead."""
    return then_ms > now_ms * STALE_MARGIN


def quick_eager_ms(problem: Problem, device: int, policy: PrecisionPolicy,
                   instance: ProblemInstance | None = None) -> float:
    """The median of a few eager calls on input set 0, L2 flushed before each, as the full timing does."""
    instance = instance or instantiate(problem, 0, f"cuda:{device}")
    with torch_precision(policy):
        return time_torch_calls([functools.partial(instance.model, *instance.args)], device, QUICK_PLAN).median_ms


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
                          rotating_sets=rotating_sets,
                          quick_eager_ms=quick_eager_ms(problem, device, policy, model_instance))


def _cache_path(problem: Problem, device: int, policy: str, with_compile: bool, cache_dir: Path) -> Path:
    gpu = re.sub(r"[^A-Za-z0-9]+", "_", torch.cuda.get_device_name(device))
    torch_version = re.sub(r"[^A-Za-z0-9.]+", "_", torch.__version__)
    variant = "eager+compile" if with_compile else "eager"
    return cache_dir / "baselines" / f"{problem.sha256[:16]}-{gpu}-{policy}-{variant}-torch{torch_version}.json"
