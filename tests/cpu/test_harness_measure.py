"""Pure functions of measurement: harness/stats.py, the planning and escape check of harness/timing.py,
and the roofline floor of harness/roofline.py (peaks and timings built by hand; no GPU)."""

from __future__ import annotations

import pytest

from kernelblaster.harness.result import CandidateTiming, Roofline
from kernelblaster.harness.roofline import HEADROOM, GpuPeaks, below_compute_floor, roofline_check, roofline_for
from kernelblaster.harness.spec import ProblemSpec, TensorSpec
from kernelblaster.harness.stats import TimingStats
from kernelblaster.harness.timing import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    TARGET_TIMED_SECONDS,
    IterationPlan,
    stream_escape_check,
)

# ---- TimingStats ---------------------------------------------------------------------------------------


def test_from_samples_takes_the_median_of_unsorted_samples() -> None:
    assert TimingStats.from_samples([5.0, 1.0, 3.0, 2.0, 4.0]).median_ms == 3.0
    assert TimingStats.from_samples([4.0, 1.0, 3.0, 2.0]).median_ms == 2.5


def test_from_samples_interpolates_quartiles() -> None:
    stats = TimingStats.from_samples([float(v) for v in range(1, 10)])  # 1..9
    assert (stats.p25_ms, stats.p75_ms, stats.iqr_ms) == (3.0, 7.0, 4.0)
    assert TimingStats.from_samples([1.0, 2.0]).p25_ms == pytest.approx(1.25)


def test_from_samples_reports_min_max_mean_count_and_cv() -> None:
    stats = TimingStats.from_samples([1.0, 3.0])
    assert (stats.min_ms, stats.max_ms, stats.mean_ms, stats.samples) == (1.0, 3.0, 2.0, 2)
    assert stats.cv == pytest.approx(0.5)  # population std 1.0 over mean 2.0


def test_identical_samples_have_zero_spread() -> None:
    stats = TimingStats.from_samples([0.25] * 7)
    assert (stats.cv, stats.iqr_ms, stats.median_ms) == (0.0, 0.0, 0.25)


def test_a_single_sample_is_every_statistic() -> None:
    stats = TimingStats.from_samples([0.5])
    assert (stats.median_ms, stats.p25_ms, stats.p75_ms, stats.cv, stats.samples) == (0.5, 0.5, 0.5, 0.0, 1)


def test_no_samples_is_an_error() -> None:
    with pytest.raises(ValueError, match="no timing samples"):
        TimingStats.from_samples([])


def test_describe_reports_microseconds() -> None:
    assert TimingStats.from_samples([0.010, 0.012, 0.014]).describe().startswith("12.0 us median")


# ---- IterationPlan -------------------------------------------------------------------------------------


def test_iteration_plan_fills_the_target_time() -> None:
    per_call_ms = TARGET_TIMED_SECONDS * 1000 / 100  # a call that fits 100 times in the target time
    assert MIN_ITERATIONS < 100 < MAX_ITERATIONS
    plan = IterationPlan.for_estimate(per_call_ms)
    assert plan.iterations == 100
    assert plan.warmup == 10


@pytest.mark.parametrize("estimate_ms", [1e-6, 0.0, -1.0])
def test_iteration_plan_caps_iterations_for_tiny_estimates(estimate_ms: float) -> None:
    assert IterationPlan.for_estimate(estimate_ms).iterations == MAX_ITERATIONS


def test_iteration_plan_keeps_a_minimum_for_slow_calls() -> None:
    plan = IterationPlan.for_estimate(10_000.0)
    assert plan.iterations == MIN_ITERATIONS
    assert plan.warmup == 5


# ---- stream_escape_check -------------------------------------------------------------------------------


def timing(incomplete_calls: int, calls: int = 40) -> CandidateTiming:
    return CandidateTiming(event=TimingStats.from_samples([0.010]), rotating_sets=2, l2_flush=True, calls=calls,
                           incomplete_calls=incomplete_calls, policy_windows=0)


def test_calls_whose_outputs_changed_after_the_stream_finished_fail_stream_escape() -> None:
    check = stream_escape_check(timing(incomplete_calls=3))
    assert check.name == "stream_escape"
    assert not check.passed
    assert "3 of 40 calls" in check.detail and "escaped the timed stream" in check.detail


def test_a_single_incomplete_call_is_enough_to_fail() -> None:
    assert not stream_escape_check(timing(incomplete_calls=1, calls=1000)).passed


def test_calls_whose_outputs_were_final_when_the_stream_finished_pass() -> None:
    check = stream_escape_check(timing(incomplete_calls=0))
    assert check.passed
    assert "final" in check.detail


# ---- roofline ------------------------------------------------------------------------------------------

PEAKS = GpuPeaks(gpu_name="Test GPU", bandwidth_gbs=1000.0, fp32_tflops=50.0, tf32_tflops=400.0,
                 fp16_tflops=800.0, measured_at="2025-01-01T00:00:00+00:00")


def spec_moving(total_bytes: int) -> ProblemSpec:
    """A spec whose compulsory traffic is `total_bytes` (one float32 input and an output of the same size)."""
    numel = total_bytes // 8

    def tensor(name: str) -> TensorSpec:
        return TensorSpec(name=name, origin="test", dtype="float32", shape=[numel], strides=[1])

    return ProblemSpec(problem_name="t", problem_sha256="0" * 64, inputs=[tensor("x")], params=[],
                       outputs=[tensor("out")], constants=[], output_is_tuple=False)


def test_a_memory_bound_floor_is_bytes_over_bandwidth_with_headroom() -> None:
    spec = spec_moving(1_000_000_000)  # 1 GB at 1000 GB/s is 1 ms, 0.8 ms with headroom
    roofline = roofline_for(spec, flops=1_000_000, peaks=PEAKS, policy="strict")
    assert roofline.limited_by == "memory"
    assert roofline.floor_ms == pytest.approx(1.0 / HEADROOM)
    assert (roofline.compulsory_bytes, roofline.peak_bandwidth_gbs) == (1_000_000_000, 1000.0)
    assert roofline.peak_tflops == pytest.approx(400.0 / 3)


def test_a_compute_bound_floor_is_flops_over_the_policy_peak_with_headroom() -> None:
    spec = spec_moving(8_000)
    flops = 50 * 10**12  # 3/8 s at 400/3 TFLOP/s (3xTF32 under strict), 1/8 s at 400 TFLOP/s (tf32)
    strict = roofline_for(spec, flops=flops, peaks=PEAKS, policy="strict")
    tf32 = roofline_for(spec, flops=flops, peaks=PEAKS, policy="tf32")
    assert strict.limited_by == tf32.limited_by == "compute"
    assert strict.floor_ms == pytest.approx(375.0 / HEADROOM)
    assert tf32.floor_ms == pytest.approx(125.0 / HEADROOM)
    assert tf32.peak_tflops == 400.0


def test_an_honest_3xtf32_kernel_at_three_times_the_fp32_peak_is_not_below_the_strict_floor() -> None:
    spec = spec_moving(8_000)
    flops = 50 * 10**12
    strict = roofline_for(spec, flops=flops, peaks=PEAKS, policy="strict")
    three_tf32_ms = flops / (400.0 / 3 * 1e9)  # every product at 3xTF32's full effective peak
    assert three_tf32_ms > strict.floor_ms and three_tf32_ms < flops / (50.0 * 1e9)
    assert strict.peak_arithmetic == "3xTF32, a third of TF32's"


def test_the_strict_floor_keeps_the_fp32_peak_where_it_beats_a_third_of_tf32() -> None:
    peaks = PEAKS.model_copy(update={"tf32_tflops": 120.0})
    strict = roofline_for(spec_moving(8_000), flops=50 * 10**12, peaks=peaks, policy="strict")
    assert strict.peak_tflops == 50.0 and strict.peak_arithmetic == "fp32 FFMA"


def test_the_floor_is_the_larger_of_memory_and_compute_time() -> None:
    spec = spec_moving(1_000_000_000)  # 1 ms of memory before headroom
    just_memory = roofline_for(spec, flops=130 * 10**9, peaks=PEAKS, policy="strict")  # 0.975 ms at 400/3 TFLOP/s
    just_compute = roofline_for(spec, flops=136 * 10**9, peaks=PEAKS, policy="strict")  # 1.02 ms
    assert just_memory.limited_by == "memory" and just_compute.limited_by == "compute"
    assert just_compute.floor_ms == pytest.approx(1.02 / HEADROOM)
    assert just_memory.floor_ms == pytest.approx(1.0 / HEADROOM)


def floor(floor_ms: float) -> Roofline:
    return Roofline(compulsory_bytes=10**9, flops=0, peak_bandwidth_gbs=1000.0, peak_tflops=50.0, floor_ms=floor_ms,
                    limited_by="memory")


def test_a_time_below_the_floor_fails_the_roofline_check() -> None:
    measured, check = roofline_check(floor(0.8), time_ms=0.4)
    assert check.name == "roofline"
    assert not check.passed
    assert "below the memory floor" in check.detail and "implausible" in check.detail
    assert measured.fraction_of_floor == pytest.approx(2.0)


def test_a_time_above_the_floor_passes_with_its_fraction() -> None:
    measured, check = roofline_check(floor(0.8), time_ms=1.6)
    assert check.passed
    assert measured.fraction_of_floor == pytest.approx(0.5)
    assert check.detail.startswith("50% of the memory-bound floor")


def test_roofline_check_does_not_modify_the_roofline_it_is_given() -> None:
    original = floor(0.8)
    roofline_check(original, time_ms=1.6)
    assert original.fraction_of_floor is None


# KernelBench level2/14 (GEMM 1024x8192 by 8192x8192, divide, sum, scale) on a 3000 GB/s, 50 TFLOP/s GPU: about
# 0.08 ms of compulsory bytes, 2.2 ms of the reference's FLOPs; x times W's column sums takes about 0.1 ms.
GEMM_SUM_BYTES = (1024 * 8192 + 8192 * 8192 + 1024) * 4
GEMM_SUM_FLOPS = 2 * 1024 * 8192 * 8192
FAST_PEAKS = PEAKS.model_copy(update={"bandwidth_gbs": 3000.0})


def gemm_sum_roofline() -> Roofline:
    return roofline_for(spec_moving(GEMM_SUM_BYTES), flops=GEMM_SUM_FLOPS, peaks=FAST_PEAKS, policy="strict")


def test_an_algebraic_rewrite_below_the_compute_floor_is_not_suspicious() -> None:
    roofline = gemm_sum_roofline()
    assert roofline.memory_floor_ms is not None and roofline.compute_floor_ms is not None
    assert roofline.memory_floor_ms < 0.1 < roofline.compute_floor_ms
    _, check = roofline_check(roofline, time_ms=0.1)
    assert check.passed
    assert "compute floor" in check.detail and "more seeds" in check.detail


def test_a_time_below_the_compute_floor_alone_earns_extra_verification() -> None:
    roofline = gemm_sum_roofline()
    assert below_compute_floor(roofline, time_ms=0.1)
    assert not below_compute_floor(roofline, time_ms=3.0)


def test_a_time_below_the_memory_floor_is_suspicious_even_when_the_floor_is_compute_bound() -> None:
    roofline = gemm_sum_roofline()
    assert roofline.limited_by == "compute"
    _, check = roofline_check(roofline, time_ms=0.01)
    assert not check.passed and "below the memory floor" in check.detail
    assert not below_compute_floor(roofline, time_ms=0.01)  # rejected, not verified further


def test_the_floor_shown_to_agents_stays_the_larger_of_the_two() -> None:
    roofline = gemm_sum_roofline()
    assert roofline.floor_ms == pytest.approx(roofline.compute_floor_ms)


def test_a_roofline_recorded_before_the_floors_were_split_keeps_its_whole_floor() -> None:
    old = Roofline(compulsory_bytes=10**9, flops=10**12, peak_bandwidth_gbs=1000.0, peak_tflops=50.0, floor_ms=16.0,
                   limited_by="compute")
    assert not roofline_check(old, time_ms=8.0)[1].passed
    assert not below_compute_floor(old, time_ms=8.0)
