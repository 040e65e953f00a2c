"""harness/verdict.py: the one place a verdict is decided, from what the stages found, in the order of
responsibility; how an exception of the harness is kept (one line, the traceback aside); and how
compute-sanitizer's runs on a verified candidate count (reports from tests/fixtures/sanitizer_stand_in.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.sanitizer_stand_in import CLEAN, MEMCHECK_OUT_OF_BOUNDS, NO_SUMMARY

from kernelblaster.harness.build import BuildResult
from kernelblaster.harness.memory_plan import GIB, MIB, GpuMemory, ProblemSizes, plan_memory
from kernelblaster.harness.result import CandidateTiming, CheckResult, Roofline
from kernelblaster.harness.stats import TimingStats
from kernelblaster.harness.verdict import Findings, Measurement, Score, decide
from kernelblaster.harness.verify import DriverFailure, Verification
from kernelblaster.tools.driver_process import DriverCrashed, DriverForged
from kernelblaster.tools.sanitizer import SanitizerTool, parse_sanitizer_output

BUILT = BuildResult(stage="ok", violations=[], compile=None, link=None, source_path=Path("candidate.cu"),
                    header_path=Path("kb_problem.h"), program=None)
GPU = GpuMemory(name="Test GPU", free_bytes=80 * GIB, l2_bytes=50 * MIB)


def passing(*names: str) -> list[CheckResult]:
    return [CheckResult(name=name, passed=True, detail="fine") for name in names]


def failing(name: str) -> CheckResult:
    return CheckResult(name=name, passed=False, detail=f"{name} went wrong")


def timing(ms: float = 0.5) -> CandidateTiming:
    return CandidateTiming(event=TimingStats.from_samples([ms]), rotating_sets=2, l2_flush=True, calls=40,
                           incomplete_calls=0, policy_windows=0)


def score(floor_passed: bool) -> Score:
    roofline = Roofline(compulsory_bytes=1, flops=0, peak_bandwidth_gbs=1.0, peak_tflops=1.0, floor_ms=0.1,
                        limited_by="memory")
    return Score(roofline, CheckResult(name="roofline", passed=floor_passed, detail="below the floor"), None, None)


def raised(error: Exception) -> Findings:
    findings = Findings(checks=passing("static", "compile"), stage="verify")
    try:
        raise error
    except Exception as caught:
        findings.fail_harness(caught)
    return findings


def test_a_build_that_failed_decides_before_anything_else() -> None:
    build = BUILT.model_copy(update={"stage": "compile_error"})
    findings = raised(RuntimeError("never reached"))
    assert decide(build, findings)[0] == "compile_error"


def test_an_exception_in_the_harness_is_a_harness_error_whatever_else_was_found() -> None:
    findings = raised(RuntimeError("CUDA out of memory. Tried to allocate 12.00 GiB\nmore lines"))
    findings.checks.append(failing("correct"))
    verdict, summary = decide(BUILT, findings)
    assert verdict == "harness_error"
    assert summary == ("the harness failed in stage verify, not the candidate: RuntimeError: CUDA out of memory. "
                       "Tried to allocate 12.00 GiB")


def test_a_harness_failure_keeps_the_traceback_apart_from_its_one_line() -> None:
    failure = raised(ValueError("bad\nsecond line")).harness_failure
    assert failure is not None
    assert (failure.stage, failure.error) == ("verify", "ValueError: bad")
    assert "Traceback (most recent call last)" in failure.traceback and "raised" in failure.traceback


def test_no_gpu_says_so() -> None:
    assert decide(BUILT, Findings(checks=passing("static", "compile"), no_gpu=True))[0] == "no_gpu"


def test_a_plan_that_does_not_fit_is_too_large_and_names_the_bytes() -> None:
    plan = plan_memory(ProblemSizes(input_bytes=60 * GIB, param_bytes=0, output_bytes=60 * GIB,
                                    forward_peak_bytes=60 * GIB, float_inputs=True), GPU, seeds=5)
    verdict, summary = decide(BUILT, Findings(checks=passing("static", "compile"), plan=plan))
    assert verdict == "too_large"
    assert "80.0 GiB are free on Test GPU" in summary


def test_a_crash_is_the_candidates() -> None:
    findings = Findings(checks=passing("static", "compile"))
    findings.add_verification(Verification(checks=[DriverFailure("crash", "illegal address").check()],
                                            failure=DriverFailure("crash", "illegal address")))
    assert decide(BUILT, findings) == ("crash", "illegal address")


def test_a_driver_the_sandbox_stopped_is_a_sandbox_violation_naming_the_call() -> None:
    stopped = DriverCrashed("the driver exited without replying to 'run'", 159,
                            "kernelblaster-sandbox: blocked execve (the candidate tried to run another program)\n")
    findings = Findings(checks=passing("static", "compile"))
    failure = DriverFailure.of(stopped)
    findings.add_verification(Verification(checks=[failure.check()], failure=failure))
    assert decide(BUILT, findings) == (
        "sandbox_violation", "the sandbox blocked execve (the candidate tried to run another program)")
    assert findings.checks[-1].name == "sandbox"


@pytest.mark.parametrize("status", [159, -31], ids=["launcher_status", "killed_by_sigsys"])
def test_a_driver_the_sandbox_stopped_without_a_name_is_still_a_sandbox_violation(status: int) -> None:
    # A candidate that blocks SIGSYS dies of the filter's refusal before the launcher can name the call; one
    # that left a line open on stderr still gets it named (tests/hostile: sigsys_blocked_then_exec and
    # blocked_after_partial_line).
    failure = DriverFailure.of(DriverCrashed("the driver exited without replying to 'start'", status,
                                             "HOSTILE: a line left open"))
    assert failure.verdict == "sandbox_violation" and failure.detail.startswith("the sandbox blocked a forbidden")


def test_a_report_after_a_partial_line_still_names_the_call() -> None:
    report = "execve (the candidate tried to run another program)"
    stopped = DriverCrashed("the driver exited without replying to 'start'", 159,
                            f"a line left open\nkernelblaster-sandbox: blocked {report}\n")
    assert DriverFailure.of(stopped).detail == f"the sandbox blocked {report}"


def test_a_crash_with_another_status_is_a_crash() -> None:
    assert DriverFailure.of(DriverCrashed("the driver exited without replying to 'run'", -11, "")).verdict == "crash"


def test_a_forged_reply_is_a_forged_result_never_ok() -> None:
    failure = DriverFailure.of(DriverForged("a reply numbered 1 arrived while the driver owed reply 2", ""))
    findings = Findings(checks=[*passing("static", "compile"), failure.check()], driver_failure=failure)
    verdict, summary = decide(BUILT, findings)
    assert verdict == "forged_result" and summary.startswith("a reply numbered 1 arrived")
    assert failure.check().name == "genuine_results"


def test_the_first_failed_check_makes_it_incorrect() -> None:
    findings = Findings(checks=[*passing("static", "compile", "runs"), failing("correct")])
    assert decide(BUILT, findings) == ("incorrect", "failed check 'correct': correct went wrong")


@pytest.mark.parametrize("check", ["stream_escape", "timed_outputs", "extra_verification"])
def test_a_failed_check_on_the_timed_calls_makes_it_incorrect(check: str) -> None:
    findings = Findings(checks=passing("static", "compile", "runs", "correct"))
    findings.add_measurement(Measurement(timing(), [failing(check)]))
    assert decide(BUILT, findings)[0] == "incorrect"
    assert not findings.passed


def test_a_time_below_the_roofline_floor_is_suspicious() -> None:
    findings = Findings(checks=passing("static", "compile", "runs", "correct"))
    findings.add_measurement(Measurement(timing(), passing("stream_escape", "timed_outputs")))
    findings.add_score(score(floor_passed=False))
    assert decide(BUILT, findings) == ("suspicious", "below the floor")


def test_a_measured_correct_kernel_is_ok_with_its_time() -> None:
    findings = Findings(checks=passing("static", "compile", "runs", "correct"))
    findings.add_measurement(Measurement(timing(0.25), passing("stream_escape", "timed_outputs")))
    findings.add_score(score(floor_passed=True))
    assert decide(BUILT, findings) == ("ok", "correct; 250.0 us")


def test_a_verified_kernel_not_yet_timed_is_ok() -> None:
    assert decide(BUILT, Findings(checks=passing("static", "compile", "runs", "correct"))) == (
        "ok", "passed every correctness check")


def sanitized(*reports: tuple[SanitizerTool, str]) -> Findings:
    """A verified candidate's findings after compute-sanitizer runs that printed `reports`."""
    findings = Findings(checks=passing("static", "compile", "runs", "correct"))
    findings.add_sanitizer([parse_sanitizer_output(text, tool) for tool, text in reports])
    return findings


def test_compute_sanitizer_errors_make_it_a_sanitizer_error_naming_the_first_finding() -> None:
    findings = sanitized((SanitizerTool.MEMCHECK, MEMCHECK_OUT_OF_BOUNDS), (SanitizerTool.RACECHECK, CLEAN))
    verdict, summary = decide(BUILT, findings)
    assert verdict == "sanitizer_error"
    assert summary == ("compute-sanitizer memcheck: 1 error - Invalid __global__ read of size 4 bytes "
                       "at swish_scale(const float *, float *, long)+0x70 in candidate.cu:12")
    assert findings.checks[-1].name == "sanitizer" and not findings.passed


def test_clean_compute_sanitizer_runs_pass_the_sanitizer_check() -> None:
    findings = sanitized((SanitizerTool.MEMCHECK, CLEAN), (SanitizerTool.RACECHECK, CLEAN))
    assert decide(BUILT, findings) == ("ok", "passed every correctness check")
    assert findings.checks[-1] == CheckResult(name="sanitizer", passed=True,
                                              detail="compute-sanitizer memcheck, racecheck: no errors")


def test_a_compute_sanitizer_run_without_a_report_is_the_harness_failing_not_the_candidate() -> None:
    verdict, summary = decide(BUILT, sanitized((SanitizerTool.MEMCHECK, CLEAN), (SanitizerTool.RACECHECK, NO_SUMMARY)))
    assert verdict == "harness_error"
    assert summary == ("the harness failed in stage sanitize, not the candidate: compute-sanitizer racecheck gave no "
                       "report: compute-sanitizer printed no error summary")
