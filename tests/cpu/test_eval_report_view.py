"""`bench report` as a person sees it: the plots name every line and colour they draw and show no empty frame,
and the HTML page, laid out by a real browser (headless Chromium, where installed), fits its window with every
plot shown."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from fixtures.report.browser import chromium, layout
from fixtures.suite.report_suite import recorded_suite
from matplotlib.colors import to_hex
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from kernelblaster.eval import plots
from kernelblaster.eval.report import write_report
from kernelblaster.eval.results import ResultsDB

needs_browser = pytest.mark.skipif(chromium() is None, reason="needs Chromium (Debian: apt-get install chromium)")


@pytest.fixture(scope="module")
def suites(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three suites of 22 problems: b has a's results (its curves coincide with a's), c its own."""
    root = tmp_path_factory.mktemp("suites")
    return [recorded_suite(root / "a", seed=1), recorded_suite(root / "b", seed=1, memory="none"),
            recorded_suite(root / "c", seed=7, memory="frozen")]


@pytest.fixture(scope="module")
def series(suites: list[Path]) -> list[plots.Series]:
    found = []
    for suite in suites:
        db = ResultsDB.open(suite / "results.sqlite")
        found.append(plots.Series(suite.name, db.problems()))
        db.close()
    return found


@pytest.fixture(scope="module")
def page(suites: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    write_report(suites[0], suites[1:], out)
    return out / "report.html"


def test_coinciding_fast_p_curves_are_each_drawn_with_their_own_marker_and_the_later_says_so(
        series: list[plots.Series]) -> None:
    figure = plots.fast_p_plot(series)
    for axis in figure.axes:
        lines = [line for line in axis.get_lines() if isinstance(line, Line2D)]
        assert len({line.get_marker() for line in lines}) == len({line.get_linestyle() for line in lines}) == 3
    labels = [text.get_text() for text in figure.legends[0].get_texts()]
    assert labels == ["a", "b (same curve as a)", "c"]


def test_every_histogram_bar_is_in_a_colour_its_legend_names_and_none_overlaps_another(
        series: list[plots.Series]) -> None:
    figure = plots.speedup_distribution_plot(series)
    assert figure is not None
    bars = [patch for patch in figure.axes[0].patches if isinstance(patch, Rectangle) and patch.get_height() > 0]
    named = {to_hex(handle.get_facecolor()) for handle in figure.legends[0].legend_handles
             if isinstance(handle, Rectangle)}
    assert {to_hex(bar.get_facecolor()) for bar in bars} == named and len(named) == 3
    assert all(bar.get_alpha() in (None, 1.0) for bar in bars)
    spans = sorted((bar.get_x(), bar.get_x() + bar.get_width()) for bar in bars)
    assert all(right <= next_left + 1e-9 for (_, right), (next_left, _) in pairwise(spans))


def test_the_kb_size_line_on_the_second_axis_has_its_own_legend_entry(suites: list[Path]) -> None:
    db = ResultsDB.open(suites[0] / "results.sqlite")
    figure = plots.kb_growth_plot(db.versions())
    db.close()
    assert "size (kB, right axis)" in [text.get_text() for text in figure.legends[0].get_texts()]


def test_problem_names_read_level_beside_their_bars(series: list[plots.Series]) -> None:
    for figure in (plots.tokens_plot(series[0].rows, None), plots.roofline_plot(series[0].rows)):
        assert figure is not None
        names = figure.axes[0].get_yticklabels()
        assert all(name.get_rotation() == 0 for name in names)
        assert "level1/54_conv_standard_3D__square_input__square_kernel" in [name.get_text() for name in names]


def test_plots_with_nothing_to_show_are_none_rather_than_empty_frames() -> None:
    nothing = plots.Series("empty", [])
    assert plots.speedup_distribution_plot([nothing]) is None
    assert plots.tokens_plot([], None) is None
    assert plots.roofline_plot([]) is None


@needs_browser
@pytest.mark.parametrize("width", [1280, 1024])
def test_in_a_desktop_window_nothing_reaches_past_the_page_or_scrolls_and_every_plot_is_shown(page: Path,
                                                                                               width: int) -> None:
    seen = layout(page, width)
    assert (seen.page, seen.scrolling, seen.hidden) == ([], [], [])


@needs_browser
def test_in_a_narrow_window_wide_tables_scroll_in_their_own_box_and_the_page_never_widens(page: Path) -> None:
    seen = layout(page, 480)
    assert seen.page == [] and seen.hidden == []
    assert seen.scrolling  # the level and problem tables are wider than 480 pixels


@needs_browser
def test_the_layout_check_sees_an_element_wider_than_the_window(tmp_path: Path) -> None:
    wide = tmp_path / "wide.html"
    wide.write_text("<!doctype html><html><body><table><tr><td style='min-width:3000px'>x</td></tr></table>"
                    "</body></html>")
    seen = layout(wide, 1024)
    assert seen.page and seen.page[0].startswith("the page is")
