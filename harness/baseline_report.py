"""`kernelblaster baseline`: the PyTorch baselines of a problem with their roofline and, optionally, profile."""

from __future__ import annotations

import torch
from pydantic import BaseModel

from harness.baseline import baseline_for
from harness.evaluate import MAX_ROTATING_SETS, default_cache_dir
from harness.precision import PrecisionPolicy
from harness.problem import Problem, instantiate
from harness.profile import ProfileOutcome
from harness.profile_run import profile_pytorch
from harness.result import BaselineTiming, Roofline
from harness.roofline import count_flops, peaks_for_device, roofline_check, roofline_for
from harness.spec import derive_spec

PROFILE_TIMEOUT_S = 600.0


class BaselineReport(BaseModel):
    problem: str
    gpu: str
    precision: str
    timing: BaselineTiming
    roofline: Roofline
    profile: ProfileOutcome | None = None


def measure_baseline_report(problem: Problem, gpu: int, precision: PrecisionPolicy, profile: bool) -> BaselineReport:
    cache_dir = default_cache_dir()
    instance = instantiate(problem, 0, f"cuda:{gpu}")
    spec = derive_spec(instance)
    timing = baseline_for(problem, gpu, precision, MAX_ROTATING_SETS, cache_dir)
    floor = roofline_for(spec, count_flops(instance), peaks_for_device(gpu, cache_dir), precision)
    roofline, _ = roofline_check(floor, timing.best_ms)
    workdir = cache_dir / "baselines" / problem.sha256[:16]
    workdir.mkdir(parents=True, exist_ok=True)
    return BaselineReport(
        problem=str(problem.path), gpu=torch.cuda.get_device_name(gpu), precision=precision, timing=timing,
        roofline=roofline,
        profile=profile_pytorch(problem.path, gpu, precision, workdir, PROFILE_TIMEOUT_S) if profile else None,
    )
