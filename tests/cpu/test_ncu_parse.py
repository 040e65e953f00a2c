"""Parsing ncu's details-page CSV, checked against a real recording (ncu 2025.3.1, H200) of two kernels."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from kernelblaster.harness.profile.report import NcuReport, parse_details_csv, parse_number
from kernelblaster.tools.errors import UserFacingError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"


@pytest.fixture(scope="module")
def details_text() -> str:
    return (FIXTURES / "details_rules.csv").read_text()


@pytest.fixture(scope="module")
def report(details_text: str) -> NcuReport:
    return parse_details_csv(details_text)


@pytest.fixture(scope="module")
def raw_metrics() -> list[dict[str, str]]:
    """The same two launches from the raw page (metric name -> value), an independent source of truth."""
    header, _units, *rows = list(csv.reader(io.StringIO((FIXTURES / "raw.csv").read_text())))
    return [dict(zip(header, row, strict=True)) for row in rows]


def test_kernels_are_in_launch_order_with_their_names(report: NcuReport) -> None:
    assert [k.id for k in report.kernels] == [0, 1]
    assert [k.name for k in report.kernels] == ["scale(const float *, float *, int)",
                                                 "rowsum(const float *, float *, int)"]
    assert [k.short_name for k in report.kernels] == ["scale", "rowsum"]


def test_launch_configuration_of_each_kernel(report: NcuReport) -> None:
    scale, rowsum = report.kernels
    assert (scale.block_size, scale.grid_size) == ((256, 1, 1), (65536, 1, 1))
    assert (rowsum.block_size, rowsum.grid_size) == ((256, 1, 1), (4096, 1, 1))
    assert scale.compute_capability == "9.0"


def _number(text: str) -> float:
    value = parse_number(text)
    assert value is not None, f"{text!r} is a number on the raw page"
    return value


def test_registers_and_shared_memory_match_the_raw_page(report: NcuReport, raw_metrics: list[dict[str, str]]) -> None:
    for kernel, raw in zip(report.kernels, raw_metrics, strict=True):
        assert kernel.registers_per_thread == int(raw["launch__registers_per_thread"])
        # static + dynamic is the raw page's per-block figure without the driver's reserved share
        expected = _number(raw["launch__shared_mem_per_block"]) - _number(raw["launch__shared_mem_per_block_driver"])
        assert kernel.shared_memory_bytes == expected
    assert [k.shared_memory_bytes for k in report.kernels] == [0, 1024]


def test_duration_and_elapsed_cycles_of_scale(report: NcuReport) -> None:
    scale = report.kernels[0]
    assert scale.duration_ns == 49_696
    assert scale.elapsed_cycles == 98_349


def test_durations_and_cycles_match_the_raw_page(report: NcuReport, raw_metrics: list[dict[str, str]]) -> None:
    for kernel, raw in zip(report.kernels, raw_metrics, strict=True):
        assert kernel.duration_ns == parse_number(raw["gpu__time_duration.sum"])
        assert kernel.elapsed_cycles == parse_number(raw["gpc__cycles_elapsed.max"])


def test_totals_are_sums_over_kernels(report: NcuReport) -> None:
    assert report.kernel_count == 2
    assert report.total_gpu_time_ns == 49_696 + 18_592
    assert report.total_elapsed_cycles == 98_349 + 36_707


def test_thousands_separators_are_parsed(report: NcuReport) -> None:
    frequency = report.kernels[0].metric("GPU Speed Of Light Throughput", "DRAM Frequency")
    assert frequency is not None
    assert frequency.value == pytest.approx(3_197_574_586.82)
    assert frequency.unit == "hz"


def test_non_numeric_and_multi_valued_metrics_keep_their_text(report: NcuReport) -> None:
    policy = report.kernels[0].metric("Launch Statistics", "Cluster Scheduling Policy")
    spill = report.kernels[0].metric("Memory Workload Analysis", "Local Memory Spilling Request Overhead")
    mix = report.kernels[0].metric("Instruction Statistics", "Executed Instructions by SASS Opcode Category",
                                   label="Executed Instruction Categories")
    assert policy is not None and (policy.value, policy.text) == (None, "PolicySpread")
    assert spill is not None and (spill.value, spill.text) == (None, "no data")
    assert mix is not None and mix.value is None and mix.text.startswith("8,912,896 (")


def test_same_metric_name_is_told_apart_by_section(report: NcuReport) -> None:
    scale = report.kernels[0]
    assert scale.memory_throughput_pct == pytest.approx(48.15)
    assert scale.value("Memory Workload Analysis", "Memory Throughput") == pytest.approx(2_315_477_141_017.39)


def test_throughput_occupancy_l2_hit_and_eligible_cycle_percentages_are_read_off_the_report(
        report: NcuReport) -> None:
    scale = report.kernels[0]
    assert scale.sm_throughput_pct == pytest.approx(40.50)
    assert scale.dram_throughput_pct == pytest.approx(48.15)
    assert scale.achieved_occupancy_pct == pytest.approx(69.78)
    assert scale.theoretical_occupancy_pct == pytest.approx(100)
    assert scale.l2_hit_rate_pct == pytest.approx(50.76)
    assert scale.eligible_cycles_pct == pytest.approx(18.29)


def test_rule_findings_carry_type_and_speedup(report: NcuReport) -> None:
    scale = report.kernels[0]
    cpi = [r for r in scale.rules if r.rule == "CPIStall"]
    assert [r.type for r in cpi] == ["WRN", "OPT", "INF"]
    opt = cpi[1]
    assert opt.section == "WarpStateStats"
    assert opt.estimated_speedup_type == "global" and opt.estimated_speedup == pytest.approx(51.85)
    assert opt.description.startswith("On average, each warp of this workload spends 49.4 cycles")


def test_rule_without_estimate_has_no_speedup(report: NcuReport) -> None:
    bottleneck = next(r for r in report.kernels[1].rules if r.rule == "SOLBottleneck")
    assert bottleneck.estimated_speedup is None
    assert bottleneck.description.startswith("Memory is more heavily utilized than Compute")


def test_optimization_findings_are_sorted_by_estimated_speedup(report: NcuReport) -> None:
    findings = report.kernels[1].optimization_findings()
    assert {f.type for f in findings} == {"OPT"}
    assert findings[0].rule == "HighPipeUtilization"
    speedups = [f.estimated_speedup for f in findings if f.estimated_speedup is not None]
    assert speedups == sorted(speedups, reverse=True)
    assert findings[-1].estimated_speedup is None


def test_stall_reasons_exclude_selected_and_are_sorted(report: NcuReport) -> None:
    stalls = report.kernels[0].stall_reasons()
    assert stalls[0].name == "Long Scoreboard"
    assert stalls[0].cycles == pytest.approx(49.39)
    assert "Selected" not in {s.name for s in stalls}
    assert [s.cycles for s in stalls] == sorted((s.cycles for s in stalls), reverse=True)


def test_pipe_utilization_takes_the_larger_active_cycle_figure(report: NcuReport) -> None:
    pipes = {p.name: p.percent for p in report.kernels[0].pipe_utilization()}
    assert pipes["FMA"] == pytest.approx(6.34)  # % of active cycles beats 4.23 % of peak instructions
    assert pipes["LSU"] == pytest.approx(12.69)  # only in the instructions table


def test_report_round_trips_through_json(report: NcuReport) -> None:
    again = NcuReport.model_validate_json(report.model_dump_json())
    assert again == report
    assert again.total_gpu_time_ns == report.total_gpu_time_ns


def test_lines_before_the_header_are_skipped(details_text: str) -> None:
    noisy = "==WARNING== something ncu printed\n" + details_text
    assert parse_details_csv(noisy).kernel_count == 2


def test_text_without_header_is_a_clear_error() -> None:
    with pytest.raises(UserFacingError, match='no header row starting with "ID"'):
        parse_details_csv("==ERROR== the report could not be loaded\n")


def test_missing_columns_are_named() -> None:
    with pytest.raises(UserFacingError, match=r"lacks column.*Metric Value"):
        parse_details_csv('"ID","Kernel Name","Block Size","Grid Size","Section Name","Metric Name","Metric Unit"\n')


def test_header_without_rows_says_no_kernel_was_profiled(details_text: str) -> None:
    header = details_text.splitlines()[0] + "\n"
    with pytest.raises(UserFacingError, match="no kernel rows"):
        parse_details_csv(header)


def test_bad_launch_configuration_names_the_line(details_text: str) -> None:
    lines = details_text.splitlines()
    lines[1] = lines[1].replace('"(256, 1, 1)"', '"256x1x1"')
    with pytest.raises(UserFacingError, match=r"line 2: Block Size is '256x1x1'"):
        parse_details_csv("\n".join(lines))


def test_non_numeric_id_names_the_line(details_text: str) -> None:
    lines = details_text.splitlines()
    lines[2] = lines[2].replace('"0"', '"zero"', 1)
    with pytest.raises(UserFacingError, match=r"line 3: ID is 'zero'"):
        parse_details_csv("\n".join(lines))


def test_row_longer_than_header_is_an_error(details_text: str) -> None:
    lines = details_text.splitlines()
    lines[5] += ',"extra","fields","beyond","the","rule","columns"'
    with pytest.raises(UserFacingError, match="line 6 has more fields than the header"):
        parse_details_csv("\n".join(lines))


def test_one_id_with_two_kernel_names_is_an_error(details_text: str) -> None:
    lines = details_text.splitlines()
    lines[4] = lines[4].replace("scale(const float *, float *, int)", "other(int)")
    with pytest.raises(UserFacingError, match=r"ID 0 is named 'other\(int\)' here"):
        parse_details_csv("\n".join(lines))


@pytest.mark.parametrize(("text", "expected"), [
    ("98,349", 98_349.0), ("0.00", 0.0), ("-1.5", -1.5), ("1e+03", 1000.0), ("no data", None),
    ("PolicySpread", None), ("8,524 (100; 75)", None), ("", None),
])
def test_a_number_is_read_with_its_thousands_separators_and_words_or_lists_read_as_none(
        text: str, expected: float | None) -> None:
    assert parse_number(text) == expected
