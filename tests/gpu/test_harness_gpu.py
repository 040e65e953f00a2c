"""GPU specification of the harness: real driver, real IPC, real kernels, real timing and profiling.

Every hand-written cheating kernel is rejected by the check meant for it; every unusual but correct kernel
is accepted, ten timings in a row; crashes and hangs are contained; examples verify, time and beat their
naive versions; a problem at KernelBench's scale is compared in chunks within its memory plan; a problem
larger than the GPU is `too_large` before anything runs; a failure of the harness itself is
`harness_error` and the next evaluation is unaffected.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TypedDict, Unpack

import pytest
import torch
from gpu.cases import ACCEPTED, EXAMPLES, REJECTED, SWISH, AcceptCase, CheatCase, ExampleCase

from kernelblaster.harness import verify
from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions, evaluate_candidate
from kernelblaster.harness.problem import load_problem
from kernelblaster.harness.profile.outcome import ProfileReport
from kernelblaster.kb.signature_fields import SIGNATURE_FIELDS

pytestmark = pytest.mark.gpu
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
PROBLEM_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "problems"
ESCAPE_RUNS = 10


class QuickOverrides(TypedDict, total=False):
    timeout_s: float
    profile: bool


def quick(cache_dir: Path, **overrides: Unpack[QuickOverrides]) -> EvalOptions:
    return EvalOptions(cache_dir=cache_dir, baseline=False, **overrides)


@pytest.mark.parametrize("case", REJECTED, ids=lambda c: c.id)
def test_cheating_kernel_is_rejected_by_its_check(case: CheatCase, cache_dir: Path) -> None:
    result = evaluate_candidate(case.problem, case.candidate, quick(cache_dir))
    assert result.verdict == "incorrect", result.summary
    assert result.failed_check is not None and result.failed_check.name in case.expected_checks, result.summary


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda c: c.id)
def test_unusual_but_correct_kernel_is_accepted(case: AcceptCase, cache_dir: Path) -> None:
    result = evaluate_candidate(case.problem, case.candidate, quick(cache_dir))
    assert result.verdict == "ok", result.summary
    assert all(check.passed for check in result.checks)


@pytest.mark.parametrize("case", EXAMPLES, ids=lambda c: c.id)
def test_fast_example_verifies_and_beats_its_naive_version(case: ExampleCase, cache_dir: Path) -> None:
    evaluator = CandidateEvaluator(load_problem(case.problem), EvalOptions(cache_dir=cache_dir))
    naive = evaluator.evaluate(case.naive.read_text(), str(case.naive))
    fast = evaluator.evaluate(case.fast.read_text(), str(case.fast))
    assert naive.verdict == "ok", naive.summary
    assert fast.verdict == "ok", fast.summary
    assert fast.time_ms is not None and naive.time_ms is not None and fast.time_ms < naive.time_ms
    assert fast.speedup is not None and fast.speedup.vs_best > 0


def test_illegal_address_is_a_crash_and_the_next_candidate_still_runs(cache_dir: Path) -> None:
    crashed = evaluate_candidate(SWISH, FIXTURES / "crash_illegal_address.cu", quick(cache_dir))
    after = evaluate_candidate(SWISH, EXAMPLES[0].naive, quick(cache_dir))
    assert crashed.verdict == "crash"
    assert "illegal" in crashed.summary.lower()
    assert after.verdict == "ok", after.summary


def test_hanging_kernel_times_out_and_the_next_candidate_still_runs(cache_dir: Path) -> None:
    hung = evaluate_candidate(SWISH, FIXTURES / "hang_forever.cu", quick(cache_dir, timeout_s=3.0))
    after = evaluate_candidate(SWISH, EXAMPLES[0].naive, quick(cache_dir))
    assert hung.verdict == "timeout"
    assert after.verdict == "ok", after.summary


def test_timing_reports_median_spread_and_rotation(cache_dir: Path) -> None:
    result = evaluate_candidate(SWISH, EXAMPLES[0].fast, quick(cache_dir))
    timing = result.timing
    assert timing is not None and timing.l2_flush
    assert timing.event.samples >= 30
    assert timing.event.p25_ms <= timing.event.median_ms <= timing.event.p75_ms
    assert timing.rotating_sets >= 2
    trusted = timing.trusted
    assert trusted is not None and trusted.calls_per_batch == timing.rotating_sets
    assert 0 < trusted.per_call_ms <= timing.event.median_ms + trusted.tolerance_ms


def test_roofline_floor_is_below_a_correct_kernels_time(cache_dir: Path) -> None:
    result = evaluate_candidate(SWISH, EXAMPLES[0].fast, quick(cache_dir))
    roofline = result.roofline
    assert roofline is not None and roofline.limited_by == "memory"
    assert result.time_ms is not None and 0 < roofline.floor_ms < result.time_ms
    assert roofline.fraction_of_floor is not None and 0 < roofline.fraction_of_floor <= 1


def test_profile_has_every_kernel_and_a_signature(cache_dir: Path) -> None:
    multi_kernel = next(case for case in ACCEPTED if case.id == "multi_kernel")
    result = evaluate_candidate(multi_kernel.problem, multi_kernel.candidate, quick(cache_dir, profile=True))
    assert isinstance(result.profile, ProfileReport), result.profile
    assert result.profile.kernel_count == 3
    assert len(result.profile.signature) == len(SIGNATURE_FIELDS)
    assert result.profile.total_gpu_time_ns > 0
    assert result.stages.profile and result.stages.profile_wait is not None  # the wait for the host's ncu apart


def test_baseline_profile_of_the_pytorch_model_is_taken_once_and_read_back(cache_dir: Path) -> None:
    evaluator = CandidateEvaluator(load_problem(SWISH), EvalOptions(cache_dir=cache_dir))
    profile = evaluator.profile_baseline()
    assert isinstance(profile, ProfileReport), profile
    assert profile.kernel_count >= 1
    later = CandidateEvaluator(load_problem(SWISH), EvalOptions(cache_dir=cache_dir))
    assert later.profile_baseline() == profile


def test_eval_cli_prints_json_with_verdict_and_speedup(cache_dir: Path) -> None:
    command = [sys.executable, "-m", "kernelblaster.graph", "eval", str(SWISH), str(EXAMPLES[0].fast), "--json"]
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "KERNELBLASTER_CACHE": str(cache_dir)}, check=False)
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert report["verdict"] == "ok"
    assert report["speedup"]["vs_best"] > 0
    assert {"compiled", "compile_log", "checks", "timing", "profile", "roofline", "source_sha256"} <= report.keys()


# ---- stream_escape: no false verdict, ten times in a row ----------------------------------------------------
CORRECT_KERNELS = [pytest.param(case.problem, case.candidate, id=f"unusual/{case.id}") for case in ACCEPTED] + [
    pytest.param(case.problem, kernel, id=f"{case.id}/{kernel.stem}") for case in EXAMPLES
    for kernel in (case.naive, case.fast)]


@pytest.mark.parametrize(("problem", "kernel"), CORRECT_KERNELS)
def test_a_correct_kernel_passes_every_timed_check_ten_times_in_a_row(problem: Path, kernel: Path,
                                                                       cache_dir: Path) -> None:
    evaluator = CandidateEvaluator(load_problem(problem), quick(cache_dir))
    built = evaluator.build(kernel.read_text(), str(kernel))
    verified = evaluator.verify(built)
    assert verified.verdict == "ok", verified.summary
    for run in range(ESCAPE_RUNS):
        measured = evaluator.measure(built, verified, profile=False)
        assert measured.verdict == "ok", f"run {run + 1}: {measured.summary}"
        assert measured.timing is not None and measured.timing.incomplete_calls == 0
        trusted = measured.timing.trusted  # the harness's own clock ran, and checked batches of timed calls
        assert trusted is not None and trusted.checked_batches >= 2, measured.timing


def test_work_escaping_the_stream_is_rejected_ten_times_in_a_row(cache_dir: Path) -> None:
    escape = next(case for case in REJECTED if case.id == "side_stream_escape")
    evaluator = CandidateEvaluator(load_problem(escape.problem), quick(cache_dir))
    built = evaluator.build(escape.candidate.read_text(), str(escape.candidate))
    verified = evaluator.verify(built)
    assert verified.verdict == "ok", verified.summary  # correct once the device is synchronised
    for run in range(ESCAPE_RUNS):
        measured = evaluator.measure(built, verified, profile=False)
        assert measured.verdict == "incorrect", f"run {run + 1}: {measured.summary}"
        assert measured.failed_check is not None and measured.failed_check.name == "stream_escape"
        assert measured.speedup is None and measured.roofline is None


def test_a_kernel_that_degrades_in_the_timed_calls_fails_the_timed_output_check(cache_dir: Path) -> None:
    degrades = next(case for case in REJECTED if case.id == "degrades_after_warmup")
    result = evaluate_candidate(degrades.problem, degrades.candidate, quick(cache_dir))
    assert result.verdict == "incorrect"
    assert result.failed_check is not None and result.failed_check.name == "timed_outputs"
    assert "never written" in result.failed_check.detail
    assert [c.name for c in result.checks if c.passed][-2:] == ["special_values", "stream_escape"]


# ---- memory ------------------------------------------------------------------------------------------------


def test_a_six_gib_problem_is_compared_in_chunks_within_its_memory_plan(cache_dir: Path) -> None:
    problem = PROBLEM_FIXTURES / "large_relu.py"
    torch.cuda.current_blas_handle()  # its workspace (PyTorch's allocator) is the process's, not the evaluation's
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before, reserved_before = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    result = evaluate_candidate(problem, FIXTURES / "relu_grid_stride.cu", quick(cache_dir))
    assert result.verdict == "ok", result.summary
    plan = result.memory
    assert plan is not None and plan.fits and plan.references == "per_case"
    assert [c.name for c in result.checks][-3:] == ["stream_escape", "timed_outputs", "roofline"]
    # What this process allocated through PyTorch (references, the output copy, comparison chunks) stays within
    # the plan's peak less the shared sets, which are allocated outside PyTorch.
    torch_peak = torch.cuda.max_memory_allocated() - before
    assert torch_peak <= plan.needed_bytes - plan.rotating_sets * plan.sizes.set_bytes, (torch_peak, plan)
    # All of it was served from the reserve the plan counts (harness/gpu_reserve.py): nothing spilled beyond it
    # but what the evaluation left allocated for the process (library workspaces of the GPU's peak measurement).
    reserved_peak = torch.cuda.max_memory_reserved() - reserved_before
    kept = torch.cuda.memory_allocated() - before
    assert plan.trusted_reserve_bytes > 0 and reserved_peak <= plan.trusted_reserve_bytes + kept, (
        reserved_peak, kept, plan)


def test_a_problem_larger_than_the_gpu_is_too_large_before_anything_runs(cache_dir: Path) -> None:
    before = torch.cuda.memory_allocated()
    result = evaluate_candidate(PROBLEM_FIXTURES / "huge_input.py", FIXTURES / "relu_grid_stride.cu",
                                quick(cache_dir))
    assert result.verdict == "too_large", result.summary
    assert result.compiled and result.timing is None
    assert [c.name for c in result.checks] == ["static", "compile"]
    assert "GiB of GPU memory" in result.summary and "are free on" in result.summary
    assert torch.cuda.memory_allocated() == before


def test_eval_cli_exits_4_for_a_problem_too_large_for_the_gpu(cache_dir: Path) -> None:
    command = [sys.executable, "-m", "kernelblaster.graph", "eval", str(PROBLEM_FIXTURES / "huge_input.py"),
               str(FIXTURES / "relu_grid_stride.cu"), "--json", "--no-baseline"]
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "KERNELBLASTER_CACHE": str(cache_dir)}, check=False)
    assert done.returncode == 4, done.stderr
    assert json.loads(done.stdout)["verdict"] == "too_large"
    assert "Traceback" not in done.stderr


# ---- the harness's own failures ----------------------------------------------------------------------------


def test_an_exception_in_the_harness_is_a_harness_error_and_the_next_evaluation_is_unaffected(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def out_of_memory(*args: object, **kwargs: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB. GPU 0 has ...\nmore")

    with monkeypatch.context() as patched:
        patched.setattr(verify, "compare_output", out_of_memory)
        failed = evaluate_candidate(SWISH, EXAMPLES[0].naive, quick(cache_dir))
    assert failed.verdict == "harness_error"
    assert failed.summary == ("the harness failed in stage verify, not the candidate: OutOfMemoryError: CUDA out "
                              "of memory. Tried to allocate 12.00 GiB. GPU 0 has ...")
    assert failed.failure is not None and "out_of_memory" in failed.failure.traceback
    after = evaluate_candidate(SWISH, EXAMPLES[0].naive, quick(cache_dir))
    assert after.verdict == "ok", after.summary
