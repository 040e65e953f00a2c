"""The typed outcome of evaluating one candidate (`EvalResult`) and of timing the PyTorch baselines."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from kernelblaster.harness.profile import ProfileOutcome
from kernelblaster.harness.stats import TimingStats

Verdict = Literal["ok", "compile_error", "static_violation", "incorrect", "crash", "timeout", "suspicious", "no_gpu"]

CHECK_ORDER = (
    "static", "compile", "runs", "outputs_written", "correct", "inputs_unchanged", "deterministic",
    "no_caching", "special_values", "stream_escape", "roofline",
)


class CheckResult(BaseModel):
    name: str
    passed: bool
    detail: str


class CandidateTiming(BaseModel):
    """Timing through the driver: CUDA events on the stream, cross-checked by host clock with device sync."""

    event: TimingStats
    host: TimingStats
    overhead_ms: float
    escape_gap_ms: float
    rotating_sets: int
    l2_flush: bool


class BaselineTiming(BaseModel):
    eager: TimingStats
    compiled: TimingStats | None
    compile_error: str | None = None
    precision: str
    rotating_sets: int

    @property
    def best_ms(self) -> float:
        times = [self.eager.median_ms] + ([self.compiled.median_ms] if self.compiled else [])
        return min(times)


class Speedup(BaseModel):
    vs_eager: float
    vs_compile: float | None
    vs_best: float

    @classmethod
    def of(cls, candidate_ms: float, baseline: BaselineTiming) -> Speedup:
        compiled = baseline.compiled.median_ms / candidate_ms if baseline.compiled else None
        return cls(vs_eager=baseline.eager.median_ms / candidate_ms, vs_compile=compiled,
                   vs_best=baseline.best_ms / candidate_ms)


class Roofline(BaseModel):
    compulsory_bytes: int
    flops: int
    peak_bandwidth_gbs: float
    peak_tflops: float
    floor_ms: float
    fraction_of_floor: float | None = None
    limited_by: Literal["memory", "compute"]


class CompileSummary(BaseModel):
    stage: str
    seconds: float
    cached: bool
    resources: list[str] = []


class EvalResult(BaseModel):
    verdict: Verdict
    summary: str
    problem: str
    problem_sha256: str
    candidate: str
    source_sha256: str
    gpu: str | None = None
    arch: str
    precision: str
    compiled: bool
    compile_log: str = ""
    compile: CompileSummary | None = None
    checks: list[CheckResult] = []
    weakly_checked: bool = False
    timing: CandidateTiming | None = None
    baseline: BaselineTiming | None = None
    speedup: Speedup | None = None
    roofline: Roofline | None = None
    profile: ProfileOutcome | None = None
    seconds: dict[str, float] = {}

    @property
    def failed_check(self) -> CheckResult | None:
        return next((check for check in self.checks if not check.passed), None)

    @property
    def time_ms(self) -> float | None:
        return self.timing.event.median_ms if self.timing else None
