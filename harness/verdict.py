"""What the evaluation stages found about one candidate (`Findings`), and the one place that turns it into a
verdict and its one-line summary (`decide`).

The order of the rules is the order of responsibility: a build that failed is the candidate's; an
exception in the harness (or a compute-sanitizer run that gave no report), a missing GPU and a problem too
large for the GPU say nothing about the candidate; a crash or hang is the candidate's; then the first
failed check (`sanitizer_error` when it is compute-sanitizer's); then the roofline.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field

from kernelblaster.harness.build import BuildResult
from kernelblaster.harness.memory_plan import MemoryPlan
from kernelblaster.harness.profile.outcome import ProfileOutcome
from kernelblaster.harness.result import (
    BaselineTiming,
    CandidateTiming,
    CheckResult,
    EvalResult,
    HarnessFailure,
    Roofline,
    Speedup,
    Verdict,
)
from kernelblaster.harness.stages import Stage, StageClock
from kernelblaster.harness.verify import DriverFailure, Verification
from kernelblaster.tools.sanitizer import SanitizerResult, render_sanitizer_report

# Stages of the build, which a build's own result records (`BuildResult.stage_seconds`).
BUILD_STAGES: frozenset[Stage] = frozenset({"static_check", "compile", "link"})


@dataclass(frozen=True)
class Measurement:
    """The timing stage's value: the timing and the checks made on the timed calls."""

    timing: CandidateTiming
    checks: list[CheckResult]
    seconds: dict[Stage, float] = field(default_factory=dict)  # event_timing and trusted_batches


@dataclass(frozen=True)
class Score:
    """The scoring stage's value: where the time stands against the roofline and the baselines."""

    roofline: Roofline
    floor_check: CheckResult
    baseline: BaselineTiming | None
    speedup: Speedup | None


@dataclass
class Findings:
    """Everything the stages found so far; stages add their values, `decide` reads them."""

    checks: list[CheckResult]
    weakly_checked: bool = False
    stages: StageClock = field(default_factory=StageClock)  # the evaluation's stages (the build's are its own)
    stage: str = "plan"  # the stage running now, named by a harness failure
    no_gpu: bool = False
    plan: MemoryPlan | None = None
    driver_failure: DriverFailure | None = None
    harness_failure: HarnessFailure | None = None
    timing: CandidateTiming | None = None
    score: Score | None = None
    profile: ProfileOutcome | None = None
    sanitizer: list[SanitizerResult] = field(default_factory=list)

    @classmethod
    def of_build(cls, build: BuildResult) -> Findings:
        if build.stage == "static_violation":
            detail = "; ".join(v.message for v in build.violations)
            return cls(checks=[CheckResult(name="static", passed=False, detail=detail)])
        return cls(checks=[CheckResult(name="static", passed=True, detail="no forbidden includes or APIs"),
                           CheckResult(name="compile", passed=build.stage == "ok", detail=compile_detail(build))])

    @classmethod
    def of_result(cls, result: EvalResult) -> Findings:
        """What an earlier stage (verification) left in its result, to go on from."""
        stages = {stage: value for stage, value in result.stages.ran().items() if stage not in BUILD_STAGES}
        return cls(checks=list(result.checks), weakly_checked=result.weakly_checked, stages=StageClock(stages),
                   plan=result.memory, sanitizer=list(result.sanitizer))

    @property
    def passed(self) -> bool:
        """No failure so far: the next stage may run."""
        return (self.harness_failure is None and self.driver_failure is None and not self.no_gpu
                and (self.plan is None or self.plan.fits) and all(check.passed for check in self.checks))

    def add_verification(self, verification: Verification) -> None:
        self.checks += verification.checks
        self.weakly_checked = verification.weakly_checked
        self.stages.merge(verification.seconds)
        self.driver_failure = verification.failure

    def add_sanitizer(self, results: list[SanitizerResult]) -> None:
        """compute-sanitizer's runs on a verified candidate: errors fail the `sanitizer` check; a run that gave
        no report is the harness's failure (no verdict on the candidate, no reward either)."""
        self.sanitizer = results
        tools = ", ".join(result.tool.value for result in results)
        found = [result for result in results if result.status == "errors"]
        unfinished = next((result for result in results if result.status != "clean"), None)
        if found:
            detail = "\n".join(render_sanitizer_report(result) for result in found)
            self.checks.append(CheckResult(name="sanitizer", passed=False, detail=detail))
        elif unfinished is not None:
            self.harness_failure = HarnessFailure(stage="sanitize", traceback="", error=(
                f"compute-sanitizer {unfinished.tool.value} gave no report: {unfinished.reason}"))
        else:
            self.checks.append(CheckResult(name="sanitizer", passed=True,
                                           detail=f"compute-sanitizer {tools}: no errors"))

    def add_measurement(self, measurement: Measurement) -> None:
        self.timing = measurement.timing
        self.checks += measurement.checks
        self.stages.merge(measurement.seconds)

    def add_score(self, score: Score) -> None:
        self.score = score
        self.checks.append(score.floor_check)

    def fail_harness(self, error: Exception) -> None:
        summary = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        self.harness_failure = HarnessFailure(stage=self.stage, error=summary.rstrip(": "),
                                              traceback="".join(traceback.format_exception(error)))


def decide(build: BuildResult, findings: Findings) -> tuple[Verdict, str]:
    """The verdict and its summary line."""
    if build.stage == "static_violation":
        return "static_violation", f"rejected before compiling: {findings.checks[0].detail}"
    if build.stage != "ok":
        return "compile_error", f"{build.stage.replace('_', ' ')}: {compile_detail(build)}"
    if findings.harness_failure is not None:
        failure = findings.harness_failure
        return "harness_error", f"the harness failed in stage {failure.stage}, not the candidate: {failure.error}"
    if findings.no_gpu:
        return "no_gpu", "compiled; no CUDA GPU is visible, so it was not run (needs an NVIDIA GPU)"
    if findings.plan is not None and not findings.plan.fits:
        return "too_large", findings.plan.too_large_summary()
    if findings.driver_failure is not None:
        return findings.driver_failure.verdict, findings.driver_failure.detail
    failed = next((c for c in findings.checks if not c.passed and c.name != "roofline"), None)
    if failed is not None:
        if failed.name == "sanitizer":  # a multi-line report: its count and first finding make the line
            return "sanitizer_error", " ".join(line.strip() for line in failed.detail.splitlines()[:3])
        return "incorrect", f"failed check '{failed.name}': {failed.detail}"
    if findings.score is not None and not findings.score.floor_check.passed:
        return "suspicious", findings.score.floor_check.detail
    if findings.timing is not None:
        return "ok", _ok_summary(findings.timing.event.median_ms, findings.score.speedup if findings.score else None)
    return "ok", "passed every correctness check"


def compile_detail(build: BuildResult) -> str:
    if build.stage == "ok":
        return f"compiled in {build.seconds:.1f} s" + (" (cached)" if build.cached else "")
    errors = [m.render() for m in build.messages if m.severity == "error"]
    return "; ".join(errors[:3]) if errors else (build.log.strip().splitlines() or ["failed"])[-1]


def _ok_summary(time_ms: float, speedup: Speedup | None) -> str:
    text = f"correct; {time_ms * 1000:.1f} us"
    if speedup:
        text += f"; {speedup.vs_best:.2f}x vs the faster PyTorch baseline"
    return text
