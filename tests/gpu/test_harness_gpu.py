"""GPU specification of the harness: real driver, real IPC, real kernels, real timing and profiling.

Every hand-written cheating kernel is rejected by the check meant for it; every unusual but correct kernel
is accepted; crashes and hangs are contained; examples verify, time and beat their naive versions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cases import ACCEPTED, EXAMPLES, REJECTED, SWISH, AcceptCase, CheatCase, ExampleCase

from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions, evaluate_candidate
from kernelblaster.harness.problem import load_problem
from kernelblaster.harness.profile import ProfileReport
from kernelblaster.harness.signature import SIGNATURE_FIELDS

pytestmark = pytest.mark.gpu
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kernelblaster-cache")


def quick(cache_dir: Path, **overrides: object) -> EvalOptions:
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
    assert fast.time_ms < naive.time_ms
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


def test_roofline_floor_is_below_a_correct_kernels_time(cache_dir: Path) -> None:
    result = evaluate_candidate(SWISH, EXAMPLES[0].fast, quick(cache_dir))
    roofline = result.roofline
    assert roofline is not None and roofline.limited_by == "memory"
    assert 0 < roofline.floor_ms < result.time_ms
    assert roofline.fraction_of_floor is not None and 0 < roofline.fraction_of_floor <= 1


def test_profile_has_every_kernel_and_a_signature(cache_dir: Path) -> None:
    multi_kernel = next(case for case in ACCEPTED if case.id == "multi_kernel")
    result = evaluate_candidate(multi_kernel.problem, multi_kernel.candidate, quick(cache_dir, profile=True))
    assert isinstance(result.profile, ProfileReport), result.profile
    assert result.profile.kernel_count == 3
    assert len(result.profile.signature) == len(SIGNATURE_FIELDS)
    assert result.profile.total_gpu_time_ns > 0


def test_baseline_profile_of_the_pytorch_model(cache_dir: Path) -> None:
    evaluator = CandidateEvaluator(load_problem(SWISH), EvalOptions(cache_dir=cache_dir))
    profile = evaluator.profile_baseline()
    assert isinstance(profile, ProfileReport), profile
    assert profile.kernel_count >= 1


def test_eval_cli_prints_json_with_verdict_and_speedup(cache_dir: Path) -> None:
    command = [sys.executable, "-m", "kernelblaster.graph", "eval", str(SWISH), str(EXAMPLES[0].fast), "--json"]
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "KERNELBLASTER_CACHE": str(cache_dir)}, check=False)
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert report["verdict"] == "ok"
    assert report["speedup"]["vs_best"] > 0
    assert {"compiled", "compile_log", "checks", "timing", "profile", "roofline", "source_sha256"} <= report.keys()
