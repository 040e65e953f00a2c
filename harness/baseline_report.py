"""`kernelblaster baseline`: the PyTorch baselines of a problem with their roofline and, optionally, profile."""

from __future__ import annotations

from pydantic import BaseModel

from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions
from kernelblaster.harness.problem import Problem
from kernelblaster.harness.profile.outcome import ProfileOutcome
from kernelblaster.harness.result import BaselineTiming, Roofline
from kernelblaster.harness.roofline import roofline_check


class BaselineReport(BaseModel):
    problem: str
    gpu: str
    precision: str
    timing: BaselineTiming
    roofline: Roofline
    profile: ProfileOutcome | None = None


def measure_baseline_report(problem: Problem, options: EvalOptions, gpu_name: str) -> BaselineReport:
    evaluator = CandidateEvaluator(problem, options)
    timing = evaluator.baseline()
    roofline, _ = roofline_check(evaluator.roofline, timing.best_ms)
    return BaselineReport(
        problem=str(problem.path), gpu=gpu_name, precision=options.precision, timing=timing, roofline=roofline,
        profile=evaluator.profile_baseline() if options.profile else None,
    )
