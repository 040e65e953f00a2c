"""The typed outcome of evaluating one candidate (`EvalResult`) and of timing the PyTorch baselines.

`EvalResult` is the JSON `kernelblaster eval --json` prints and scripts read: every field says what it
means and its unit. Times are milliseconds of GPU time unless a name says otherwise; sizes are bytes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kernelblaster.harness.machine import Machine
from kernelblaster.harness.memory_plan import MemoryPlan
from kernelblaster.harness.profile.outcome import ProfileOutcome
from kernelblaster.harness.stages import StageTimes
from kernelblaster.harness.stats import TimingStats
from kernelblaster.tools.sanitizer import SanitizerResult

Verdict = Literal["ok", "compile_error", "static_violation", "incorrect", "crash", "timeout", "suspicious", "no_gpu",
                  "too_large", "harness_error", "forged_result", "sandbox_violation", "sanitizer_error"]

# Verdicts that say nothing about the candidate: the harness or the machine could not judge it.
NOT_THE_CANDIDATES: frozenset[Verdict] = frozenset({"no_gpu", "too_large", "harness_error"})

CHECK_ORDER = (
    "static", "compile", "runs", "outputs_written", "correct", "inputs_unchanged", "deterministic",
    "no_caching", "special_values", "sanitizer", "stream_escape", "timed_outputs", "extra_verification", "roofline",
)


class CheckResult(BaseModel):
    """One verification check, in `CHECK_ORDER`; checks stop at the first failure."""

    name: str = Field(description="The check's name, one of CHECK_ORDER")
    passed: bool = Field(description="Whether the candidate passed it")
    detail: str = Field(description="What was found, written for the lowering agent to act on")


class TrustedTiming(BaseModel):
    """The harness's own clock on the candidate's calls (harness/timing.py): batches of back-to-back calls, one
    per rotating set, timed from the request to a snapshot of their outputs, less a round trip measured on the
    harness's null candidate. Only batches whose every output was then checked count."""

    per_call_ms: float = Field(description="The lowest per-call time of the checked batches, ms: the event median "
                                           "may not lie further below it than `tolerance_ms`")
    tolerance_ms: float = Field(description="How far below `per_call_ms` the event median may lie: 5% of it, or the "
                                            "fastest checked batch's measured jitter per call where that is "
                                            "larger, ms")
    round_trip_ms: float = Field(description="The fastest empty batch on the null candidate's driver, ms")
    batches: int = Field(description="Batches run")
    checked_batches: int = Field(description="Batches whose outputs were all checked (chosen after they ran)")
    calls_per_batch: int = Field(description="Calls in each batch: one per rotating set")
    # What the lowest figure was made of, for telling a loaded host from a forgery (None in older results).
    fastest_wall_ms: float | None = Field(default=None, description="That batch's wall time by the harness's clock, "
                                          "request to snapshot, ms")
    fastest_snapshot_ms: float | None = Field(default=None,
                                              description="The snapshot's own time subtracted from it, ms")
    fastest_round_trip_ms: float | None = Field(default=None, description="The round trip subtracted from it (the "
                                                "calibration's, or the null batch's beside it where larger), ms")


class CandidateTiming(BaseModel):
    """The candidate timed through the driver: CUDA events on the stream it was given, around each call."""

    event: TimingStats = Field(description="GPU time per timed call between events recorded on the stream before "
                                           "and after kb_forward, ms: the time every speedup uses")
    rotating_sets: int = Field(description="Input sets the timed calls rotated over")
    l2_flush: bool = Field(description="Whether L2 was flushed (and persisting L2 lines reset) before every call")
    calls: int = Field(description="Calls made while timing, warm-up and probe included")
    incomplete_calls: int = Field(description="Calls whose outputs were still changing after the stream's work was "
                                              "done (work escaped the timed stream); any fails `stream_escape`")
    policy_windows: int = Field(description="Calls that left an L2 access-policy window on the stream; each was "
                                            "cleared before the next call, so it could not outlast the flush")
    trusted: TrustedTiming | None = Field(default=None, description="The harness's own clock on batches of the "
                                                                    "candidate's calls, which bounds `event`")


class BaselineTiming(BaseModel):
    """PyTorch eager and torch.compile, timed in the trusted process by the candidate's method."""

    eager: TimingStats = Field(description="PyTorch eager, ms")
    compiled: TimingStats | None = Field(description="torch.compile (inductor, default mode), ms; None when it "
                                                     "failed or was not asked for")
    compile_error: str | None = Field(default=None, description="Why torch.compile failed, if it did")
    precision: str = Field(description="The precision policy PyTorch ran under (its backend flags)")
    rotating_sets: int = Field(description="Input sets the timed calls rotated over")
    quick_eager_ms: float | None = Field(default=None, description="A quick eager timing (a few calls on one "
                                         "input set) taken with this one: what a later quick timing is held to "
                                         "before the cached figure is served")

    @property
    def best_ms(self) -> float:
        times = [self.eager.median_ms] + ([self.compiled.median_ms] if self.compiled else [])
        return min(times)


class Speedup(BaseModel):
    """Baseline median time over the candidate's median time: above 1 the candidate is faster."""

    vs_eager: float = Field(description="PyTorch eager time / candidate time")
    vs_compile: float | None = Field(description="torch.compile time / candidate time; None without a compiled time")
    vs_best: float = Field(description="The faster of eager and torch.compile / candidate time")

    @classmethod
    def of(cls, candidate_ms: float, baseline: BaselineTiming) -> Speedup:
        compiled = baseline.compiled.median_ms / candidate_ms if baseline.compiled else None
        return cls(vs_eager=baseline.eager.median_ms / candidate_ms, vs_compile=compiled,
                   vs_best=baseline.best_ms / candidate_ms)


class Roofline(BaseModel):
    """The fastest any implementation could be on this GPU: compulsory bytes and FLOPs over measured peaks."""

    compulsory_bytes: int = Field(description="Every input and param read once, every output written once, bytes")
    flops: int = Field(description="FLOPs of the reference as PyTorch's FLOP counter sees them")
    peak_bandwidth_gbs: float = Field(description="Measured device-to-device copy bandwidth, GB/s")
    peak_tflops: float = Field(description="Measured matrix-product peak for the precision policy, TFLOP/s")
    peak_arithmetic: str | None = Field(default=None, description="Whose peak peak_tflops is (fp32 FFMA, 3xTF32, "
                                                                  "TF32, fp16); None in results made before")
    floor_ms: float = Field(description="The larger of memory and compute time at the peaks with 25% headroom, ms")
    fraction_of_floor: float | None = Field(default=None, description="floor_ms / candidate time (1 = at the "
                                                                      "floor); None until a time is known")
    limited_by: Literal["memory", "compute"] = Field(description="Which of the two sets the floor")
    memory_floor_ms: float | None = Field(default=None, description="Compulsory bytes over the measured bandwidth "
                                                                    "with headroom, ms: the physical floor, below "
                                                                    "which a time is `suspicious`")
    compute_floor_ms: float | None = Field(default=None, description="The reference algorithm's FLOPs over the peak "
                                                                     "with headroom, ms: a time below it (an "
                                                                     "algebraic rewrite does less work) earns more "
                                                                     "verification, not rejection")

    @property
    def physical_floor_ms(self) -> float:
        """The memory floor; a roofline recorded before the floors were split counts its whole floor."""
        return self.memory_floor_ms if self.memory_floor_ms is not None else self.floor_ms


class CompileSummary(BaseModel):
    """How the candidate's build went."""

    stage: str = Field(description="The build stage that stopped it: static_violation, compile_error, link_error; "
                                   "ok when none did")
    seconds: float = Field(description="Wall time of nvcc compile and link, seconds")
    cached: bool = Field(description="Whether the object came from the compile cache")
    resources: list[str] = Field(default=[], description="ptxas resource usage, one line per kernel")


class HarnessFailure(BaseModel):
    """An exception in the trusted process (never the candidate's doing): what failed where, in full."""

    stage: str = Field(description="The stage that raised: plan, setup, verify, time, reverify, sanitize, "
                                   "profile or score")
    error: str = Field(description="The exception's type and message, one line")
    traceback: str = Field(description="The Python traceback, for a bug report")


class EvalResult(BaseModel):
    """Everything the harness found about one candidate on one problem."""

    verdict: Verdict = Field(description="ok, or why not: compile_error, static_violation, incorrect, crash, timeout, "
                                         "sanitizer_error (compute-sanitizer, asked for with --sanitize, found "
                                         "errors: see `sanitizer`), suspicious (faster than the roofline floor), "
                                         "forged_result (a result that was not the driver's), sandbox_violation "
                                         "(the sandbox blocked what it tried), no_gpu, too_large (the problem does "
                                         "not fit this GPU), harness_error (the harness failed)")
    summary: str = Field(description="The verdict's reason in one line")
    problem: str = Field(description="Path of the problem file")
    problem_sha256: str = Field(description="SHA-256 of the problem file's text")
    candidate: str = Field(description="The candidate's label (its path on the command line)")
    source_sha256: str = Field(description="SHA-256 of the candidate's source text")
    gpu: str | None = Field(default=None, description="The GPU's name; None without a GPU")
    arch: str = Field(description="The GPU architecture compiled for, e.g. sm_90")
    precision: str = Field(description="The precision policy checked against and given to the baseline")
    compiled: bool = Field(description="Whether the candidate compiled and linked with the driver")
    compile_log: str = Field(default="", description="nvcc's output, as printed")
    compile: CompileSummary | None = Field(default=None, description="The build, summarised")
    checks: list[CheckResult] = Field(default=[], description="Checks run, in CHECK_ORDER, up to the first failure")
    weakly_checked: bool = Field(default=False, description="The reference output is near zero or constant, so "
                                                            "correctness is only weakly checked")
    timing: CandidateTiming | None = Field(default=None, description="The candidate's timing; None unless measured")
    baseline: BaselineTiming | None = Field(default=None, description="The PyTorch baselines compared against")
    speedup: Speedup | None = Field(default=None, description="Speedups over the baselines (ratios of median times; "
                                                              "above 1 the candidate is faster)")
    roofline: Roofline | None = Field(default=None, description="The roofline floor and where the candidate is")
    profile: ProfileOutcome | None = Field(default=None, description="The Nsight Compute profile, when asked for")
    sanitizer: list[SanitizerResult] = Field(default=[], description="compute-sanitizer's findings, one run per "
                                                                     "checker asked for with --sanitize; empty when "
                                                                     "none ran")
    memory: MemoryPlan | None = Field(default=None, description="How the evaluation used GPU memory; None when it "
                                                                "never reached the GPU")
    failure: HarnessFailure | None = Field(default=None, description="For harness_error: the exception in full")
    # Results written before stage times carried a coarse `seconds` ({build, verify, time, score}): it is
    # ignored when they are read, and they read with no stages.
    stages: StageTimes = Field(default_factory=StageTimes, description="Wall seconds per stage of the evaluation "
                               "(see StageTimes); a stage that did not run is absent")
    machine: Machine | None = Field(default=None, description="The machine it was evaluated on: GPU, driver, CUDA "
                                                              "runtime, nvcc and torch versions; None in results "
                                                              "written before machines were recorded")

    @property
    def failed_check(self) -> CheckResult | None:
        return next((check for check in self.checks if not check.passed), None)

    @property
    def time_ms(self) -> float | None:
        return self.timing.event.median_ms if self.timing else None
