"""The state signature computed from a real ncu recording (scale: elementwise, rowsum: reduction)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kernelblaster.harness.profile.report import KernelProfile, NcuReport, parse_details_csv
from kernelblaster.harness.profile.signature import (
    STALL_NAMES,
    describe_signature,
    kernel_features,
    signature_from_report,
)
from kernelblaster.kb.signature_fields import SIGNATURE_FIELDS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
STALL_FIELDS = [*STALL_NAMES, "stall_other"]


@pytest.fixture(scope="module")
def report() -> NcuReport:
    return parse_details_csv((FIXTURES / "details_rules.csv").read_text())


def _only(report: NcuReport, index: int) -> NcuReport:
    return NcuReport(kernels=[report.kernels[index]])


def _named(vector: list[float]) -> dict[str, float]:
    return dict(zip(SIGNATURE_FIELDS, vector, strict=True))


def test_signature_has_24_fields_in_the_agreed_order() -> None:
    assert len(SIGNATURE_FIELDS) == 24
    assert SIGNATURE_FIELDS[:3] == ("sm_throughput", "memory_throughput", "dram_throughput")
    assert SIGNATURE_FIELDS[-2:] == ("local_spill", "launch_count")


def test_signature_values_are_fractions(report: NcuReport) -> None:
    vector = signature_from_report(report)
    assert len(vector) == len(SIGNATURE_FIELDS)
    assert all(0.0 <= value <= 1.0 and math.isfinite(value) for value in vector)


@pytest.mark.parametrize("which", ["both", "scale", "rowsum"])
def test_stall_shares_sum_to_one(report: NcuReport, which: str) -> None:
    subject = {"both": report, "scale": _only(report, 0), "rowsum": _only(report, 1)}[which]
    named = _named(signature_from_report(subject))
    assert sum(named[field] for field in STALL_FIELDS) == pytest.approx(1.0, abs=1e-9)


def test_scale_looks_memory_latency_bound(report: NcuReport) -> None:
    named = _named(signature_from_report(_only(report, 0)))
    assert named["dram_throughput"] > named["sm_throughput"]
    assert named["stall_long_scoreboard"] > 0.75  # waiting on global loads dominates
    assert max(named[field] for field in STALL_FIELDS) == named["stall_long_scoreboard"]
    assert named["pipe_fma"] < 0.1 and named["pipe_tensor"] == 0.0


def test_scale_values_follow_the_profile(report: NcuReport) -> None:
    named = _named(signature_from_report(_only(report, 0)))
    assert named["sm_throughput"] == pytest.approx(0.4050)
    assert named["dram_throughput"] == pytest.approx(0.4815)
    assert named["l2_hit_rate"] == pytest.approx(0.5076)
    assert named["achieved_occupancy"] == pytest.approx(0.6978)
    assert named["registers_per_thread"] == pytest.approx(16 / 255)
    assert named["issue_active"] == pytest.approx(0.1829)
    assert named["pipe_lsu"] == pytest.approx(0.1269)
    assert named["local_spill"] == 0.0  # "no data" with zero spilling requests


def test_rowsum_barrier_stalls_show(report: NcuReport) -> None:
    named = _named(signature_from_report(_only(report, 1)))
    assert named["stall_barrier"] > 0.05
    assert named["dram_throughput"] > 0.75


def test_several_kernels_are_weighted_by_duration(report: NcuReport) -> None:
    scale, rowsum = (kernel_features(k) for k in report.kernels)
    combined = _named(signature_from_report(report))
    weight = 49_696 / (49_696 + 18_592)
    for field in ("sm_throughput", "dram_throughput", "stall_barrier", "pipe_alu"):
        assert combined[field] == pytest.approx(weight * scale[field] + (1 - weight) * rowsum[field])


def test_launch_count_grows_with_kernels(report: NcuReport) -> None:
    assert _named(signature_from_report(report))["launch_count"] == pytest.approx(math.log2(3) / 8)
    many = NcuReport(kernels=[report.kernels[0]] * 400)
    assert _named(signature_from_report(many))["launch_count"] == 1.0


def _bare(kernel: KernelProfile) -> KernelProfile:
    return kernel.model_copy(update={"metrics": {}, "rules": [], "registers_per_thread": None})


def test_kernel_without_metrics_gets_neutral_values(report: NcuReport) -> None:
    named = _named(signature_from_report(NcuReport(kernels=[_bare(report.kernels[0])])))
    assert named["stall_other"] == 1.0
    assert all(named[field] == 0.0 for field in SIGNATURE_FIELDS if field not in ("stall_other", "launch_count"))


def test_kernel_without_duration_is_weighted_like_the_mean_kernel(report: NcuReport) -> None:
    bare = _bare(report.kernels[1])
    named = _named(signature_from_report(NcuReport(kernels=[report.kernels[0], bare])))
    # Equal weights: half of scale's value, since the bare kernel contributes zero.
    assert named["sm_throughput"] == pytest.approx(0.4050 / 2)


def test_empty_report_gives_a_valid_signature() -> None:
    named = _named(signature_from_report(NcuReport(kernels=[])))
    assert named["stall_other"] == 1.0 and named["launch_count"] == 0.0


def test_description_of_scale_names_latency_and_long_scoreboard(report: NcuReport) -> None:
    text = describe_signature(signature_from_report(_only(report, 0)))
    assert text.startswith("latency-bound (memory-leaning): DRAM 48%")
    assert "top stall long scoreboard 82%" in text
    assert text.endswith("1 kernel(s)")


def test_description_of_rowsum_says_memory_bound(report: NcuReport) -> None:
    text = describe_signature(signature_from_report(_only(report, 1)))
    assert text.startswith("memory-bound: DRAM 78%")


def test_description_of_a_compute_heavy_vector_says_compute_bound() -> None:
    named = dict.fromkeys(SIGNATURE_FIELDS, 0.0) | {"sm_throughput": 0.9, "memory_throughput": 0.3,
                                                     "pipe_tensor": 0.7, "stall_math_pipe_throttle": 0.6,
                                                     "stall_other": 0.4}
    text = describe_signature([named[field] for field in SIGNATURE_FIELDS])
    assert text.startswith("compute-bound")
    assert "tensor pipe 70%" in text and "top stall math pipe throttle 60%" in text


def test_description_rejects_a_vector_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="24 values, got 3"):
        describe_signature([0.1, 0.2, 0.3])
