"""benchmarks/forward_ops.py: the operators a problem's forward dispatches, counted on the meta device, beside
the baseline times a `bench baseline` folder holds (here, times from the recorded evaluator, a test double)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.suite.scripted_suite import KERNELBENCH, services_factory

from kernelblaster.eval.baseline import run_baselines
from kernelblaster.eval.problems import select_problems

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "forward_ops.py"


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("forward_ops") / "baselines"
    run_baselines(out, select_problems(KERNELBENCH), [0], "strict", KERNELBENCH / "baseline_times" / "H100_Modal",
                  io.StringIO(), services_factory())
    return out


def _run(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, timeout=300,
                          check=False)


def _rows(baselines: Path, *arguments: str) -> list[str]:
    done = _run(str(baselines), str(KERNELBENCH), *arguments)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("| level")]


def test_a_one_operator_forward_counts_one_and_its_time_per_operator_is_its_time(baselines: Path) -> None:
    relu = next(row for row in _rows(baselines) if row.startswith("| level1/19_ReLU |"))
    cells = [cell.strip() for cell in relu.split("|")[1:-1]]
    assert cells[1] == "1"
    assert cells[3] != "-" and cells[4] != "-"


def test_a_convolution_relu_and_bias_add_count_three_operators(baselines: Path) -> None:
    conv = next(row for row in _rows(baselines) if row.startswith("| level2/1_Conv2D_ReLU_BiasAdd |"))
    assert conv.split("|")[2].strip() == "3"


def test_problems_names_the_numbers_shown(baselines: Path) -> None:
    assert {row.split("|")[1].strip() for row in _rows(baselines, "--problems", "23")} == {"level1/23_Softmax"}


def test_a_folder_without_baselines_is_a_one_line_error(tmp_path: Path) -> None:
    done = _run(str(tmp_path), str(KERNELBENCH))
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "not a suite directory" in done.stderr
