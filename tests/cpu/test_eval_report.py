"""`bench report`: every number in the report equals the one computed from the results database by hand,
the plots are PNG files the HTML page embeds, and `--compare` sets ablations side by side."""

from __future__ import annotations

import base64
import math
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from fixtures.graph.recorded_evaluator import MACHINE
from fixtures.suite.scripted_suite import services_factory, suite_config

from kernelblaster.eval.report import write_report
from kernelblaster.eval.results import DATABASE_NAME
from kernelblaster.eval.runner import start_suite

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PRICES = {"gpt-4.1": {"input": 2.0, "output": 8.0}}


@pytest.fixture(scope="module")
def suites(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The five-problem suite with the full method, and the same suite with memory none."""
    root = tmp_path_factory.mktemp("report")
    start_suite(root / "full", suite_config(context={"prices": PRICES}), services_factory())
    start_suite(root / "no-memory", suite_config(memory="none", context={"memory": "none"}), services_factory())
    return root / "full", root / "no-memory"


@pytest.fixture(scope="module")
def report(suites: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out")
    write_report(suites[0], [suites[1]], out)
    return out


def _query(suite: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(suite / DATABASE_NAME) as db:
        return db.execute(sql).fetchall()


def _table_row(markdown: str, first_cell: str, table: int = 0) -> list[str]:
    """The cells of the row starting with `first_cell` in the `table`-th table holding one."""
    lines = [line for line in markdown.splitlines() if line.startswith(f"| {first_cell} |")]
    return [cell.strip() for cell in lines[table].strip("|").split("|")]


def test_the_level_table_equals_the_geometric_means_computed_from_the_database(suites: tuple[Path, Path],
                                                                               report: Path) -> None:
    markdown = (report / "report.md").read_text()
    for level in (1, 2):
        speedups = [v for (v,) in _query(suites[0], f"SELECT vs_baseline FROM problems WHERE level = {level} "
                                                    "AND verdict = 'ok'")]
        eager = [v for (v,) in _query(suites[0], f"SELECT vs_eager FROM problems WHERE level = {level}")]
        row = _table_row(markdown, f"level {level}")
        assert row[1] == str(len(speedups)) and row[3] == "100.0%"
        assert row[4] == f"{math.exp(sum(map(math.log, speedups)) / len(speedups)):.2f}x"
        assert row[8] == f"{max(speedups):.2f}x"
        assert row[10] == f"{math.exp(sum(map(math.log, eager)) / len(eager)):.2f}x"


def test_fast_p_counts_the_problems_faster_than_p_over_all_problems(suites: tuple[Path, Path], report: Path) -> None:
    markdown = (report / "report.md").read_text()
    compile_speedups = [v for (v,) in _query(suites[0], "SELECT vs_compile FROM problems")]
    row = _table_row(markdown, "torch.compile")
    for p, cell in zip((0.0, 0.5, 1.0, 1.5, 2.0, 3.0), row[1:], strict=True):
        assert cell == f"{100 * sum(v > p for v in compile_speedups) / len(compile_speedups):.1f}%"


def test_the_problem_table_shows_each_rows_times_tokens_and_cost(suites: tuple[Path, Path], report: Path) -> None:
    markdown = (report / "report.md").read_text()
    for position, problem_id, best_ms, tokens in _query(suites[0], "SELECT position, problem_id, best_ms, tokens "
                                                                   "FROM problems"):
        times, costs = _table_row(markdown, str(position)), _table_row(markdown, str(position), table=1)
        assert times[1] == costs[1] == problem_id and times[6] == f"{best_ms:.4f}" and costs[2] == str(tokens)
        token_rows = _query(suites[0], f"SELECT input_tokens, output_tokens FROM tokens WHERE position = {position}")
        assert costs[3] == f"{sum(i * 2.0 + o * 8.0 for i, o in token_rows) / 1e6:.2f}"


def test_the_ablation_table_sets_both_suites_side_by_side(suites: tuple[Path, Path], report: Path) -> None:
    markdown = (report / "report.md").read_text()
    full, none = (_table_row(markdown, f"{path.name} ({ablation})")
                  for path, ablation in zip(suites, ("memory fresh", "memory none"), strict=True))
    for suite, row in zip(suites, (full, none), strict=True):
        (tokens,) = _query(suite, "SELECT SUM(tokens) FROM problems")[0]
        assert row[-1] == str(tokens)
    assert int(full[-1]) > int(none[-1])  # the learning roles and state matching cost tokens


def test_the_published_numbers_stand_beside_the_suites_with_their_sources(report: Path) -> None:
    markdown = (report / "report.md").read_text()
    assert _table_row(markdown, "KernelBlaster (paper)")[2:5] == ["1.43x", "2.50x", "1.50x"]
    assert "arXiv 2602.14293" in markdown and "arXiv 2602.24286" in markdown
    agent_rows = [cells for cells in (line.strip("|").split("|") for line in markdown.splitlines()
                                      if line.startswith("| CUDA Agent |"))]
    assert [[c.strip() for c in cells[2:5]] for cells in agent_rows] == [["2.48x", "3.27x", "1.80x"],
                                                                         ["1.87x", "2.80x", "1.52x"]]


def test_every_plot_is_a_png_file_that_the_html_page_embeds(report: Path) -> None:
    page = (report / "report.html").read_text()
    names = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", (report / "report.md").read_text())
    assert len(names) == 6  # no roofline plot: the recorded evaluator measures no roofline fraction
    for name in names:
        png = (report / name).read_bytes()
        assert png.startswith(PNG_MAGIC)
        assert f"data-name='{name}' src='data:image/png;base64,{base64.b64encode(png).decode()}'" in page
    assert "src='http" not in page and "<link" not in page


def test_a_suite_without_roofline_fractions_says_why_instead_of_showing_an_empty_plot(report: Path) -> None:
    markdown = (report / "report.md").read_text()
    section = markdown.split("## Roofline of the best kernels")[1].split("## Problems")[0]
    assert "None of the 5 best kernels has a roofline fraction" in section and "![" not in section
    assert not (report / "roofline.png").exists()


def test_the_report_cites_published_work_by_its_own_reference_never_by_an_issue_of_this_project(report: Path) -> None:
    for name in ("report.md", "report.html"):
        assert not re.search(r"issue \d+", (report / name).read_text(), re.IGNORECASE)


def test_the_report_names_the_machine_its_problems_were_measured_on(report: Path) -> None:
    markdown = (report / "report.md").read_text()
    assert (f"Measured on: {MACHINE.gpu}, driver {MACHINE.driver}, CUDA runtime {MACHINE.cuda_runtime}, "
            f"nvcc {MACHINE.nvcc}, torch {MACHINE.torch} (5 problems).") in markdown
