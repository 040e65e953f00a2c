"""The compact rendering of an ncu report that the LLM agents read, and the text file its words come from."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelblaster.harness.profile.findings import ranked_findings, render_findings
from kernelblaster.harness.profile.report import NcuReport, parse_details_csv
from kernelblaster.tools.text_sections import TextSections

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"


@pytest.fixture(scope="module")
def report() -> NcuReport:
    return parse_details_csv((FIXTURES / "details_rules.csv").read_text())


def test_default_rendering_names_both_kernels_in_launch_order(report: NcuReport) -> None:
    text = render_findings(report)
    assert text.index("#0 scale") < text.index("#1 rowsum")


@pytest.mark.parametrize("budget", [4000, 2000, 1200, 600, 300, 200])
def test_rendering_fits_its_budget(report: NcuReport, budget: int) -> None:
    assert len(render_findings(report, budget)) <= budget


@pytest.mark.parametrize("budget", [4000, 1200, 300])
def test_both_kernels_are_named_at_every_reasonable_budget(report: NcuReport, budget: int) -> None:
    text = render_findings(report, budget)
    assert "scale" in text and "rowsum" in text


def test_rendering_carries_launch_config_time_throughput_and_occupancy(report: NcuReport) -> None:
    text = render_findings(report)
    assert "grid (65536,1,1) x block (256,1,1), 16 regs/thread" in text
    assert "49.7 us (73% of GPU time), 98,349 cycles" in text
    assert "SM 40.5%" in text and "DRAM 77.8%" in text
    assert "occupancy 69.8% achieved / 100.0% theoretical" in text


def test_rendering_lists_top_stalls_with_shares(report: NcuReport) -> None:
    assert "long scoreboard 49.4 (80%)" in render_findings(report)


def test_rendering_shows_opt_findings_with_speedups_but_not_warnings(report: NcuReport) -> None:
    text = render_findings(report)
    assert "OPT LaunchConfiguration est. speedup 25% (global)" in text
    assert "smsp__pcsamp_sample_count" not in text  # the WRN finding about an optional metric


def test_larger_budget_shows_full_rule_text(report: NcuReport) -> None:
    text = render_findings(report, 100_000)
    assert "3 full waves and a partial wave of 929 thread blocks" in text


def test_findings_rank_whole_call_estimates_by_the_kernels_share_of_gpu_time(report: NcuReport) -> None:
    names = [(report.kernels[k].short_name, report.kernels[k].optimization_findings()[f].rule)
             for k, f in ranked_findings(report)]
    assert names[:3] == [("scale", "CPIStall"), ("scale", "AchievedOccupancy"), ("rowsum", "LaunchConfiguration")]
    assert names[-2:] == [("scale", "SOLBottleneck"), ("rowsum", "SOLBottleneck")]  # no estimate: last


def test_the_top_three_findings_are_shown_whole_and_the_others_named(report: NcuReport) -> None:
    text = render_findings(report)
    assert "This stall type represents about 80.4% of the total average of 61.4 cycles" in text
    assert "Load imbalances can occur between warps within a block" in text
    assert "Try launching a grid with no partial wave." in text
    assert "\n  OPT HighPipeUtilization est. speedup 93.94% (local)\n" in text
    assert "All compute pipelines are under-utilized" not in text


def test_tight_budget_keeps_detail_for_the_longest_kernel(report: NcuReport) -> None:
    text = render_findings(report, 1200)
    scale_block = text[text.index("#0 scale"):text.index("#1 rowsum")]
    rowsum_block = text[text.index("#1 rowsum"):]
    assert "OPT" in scale_block
    assert len(scale_block) > len(rowsum_block)


def test_kernels_that_do_not_fit_are_counted(report: NcuReport) -> None:
    text = render_findings(report, 230)
    assert "#0 scale" in text
    assert "(+1 more kernel(s), 18.6 us in all, not shown)" in text


def test_report_without_kernels_renders_its_totals_line() -> None:
    assert render_findings(NcuReport(kernels=[])) == (
        "ncu: 0 kernel launch(es) in launch order, GPU time 0 ns, 0 elapsed cycles")


@pytest.mark.parametrize("budget", [4000, 1200])
def test_rendering_of_the_recorded_report_is_the_recorded_text(report: NcuReport, budget: int) -> None:
    """The findings an agent reads change only when the text file or the renderer is changed on purpose
    (then regenerate tests/fixtures/ncu/findings_rules_*.txt and read the difference)."""
    assert render_findings(report, budget) + "\n" == (FIXTURES / f"findings_rules_{budget}.txt").read_text()


def test_findings_text_sections_start_at_bracketed_names_after_the_explanation() -> None:
    text = TextSections.parse("t.txt",
                              "What this file is.\n\n[header]\nncu: ${kernel_count}\n\n[share]\n (${percent}%)\n")
    assert text.fill("header", kernel_count="2") == "ncu: 2"
    assert text.fill("share", percent="73") == " (73%)"  # a piece keeps its leading space


def test_a_line_with_a_field_that_has_no_value_is_left_out() -> None:
    text = TextSections.parse("t.txt", "[kernel]\n#${id}\n  stalls: ${stalls}\n  pipes: ${pipes}\n")
    assert text.fill("kernel", id="0", stalls=None, pipes="FMA 6.3") == "#0\n  pipes: FMA 6.3"


def test_a_section_using_a_field_it_is_not_given_is_an_error_naming_both() -> None:
    text = TextSections.parse("t.txt", "[header]\nncu: ${kernels}\n")
    with pytest.raises(ValueError, match=r"t\.txt \[header\] uses \$\{kernels\}.*kernel_count"):
        text.fill("header", kernel_count="2")
