"""Benchmark suites on a GPU: a three-problem suite with scripted agents writing real kernels, end to end
through the real harness (nvcc, the driver, verification, timing, ncu), with its report; and `bench baseline`
over KernelBench level-1 problems, compared with the published H100 times.

KernelBench is read from $KERNELBLASTER_KERNELBENCH (tests/gpu/cases.py);
$KERNELBLASTER_BASELINE_PROBLEMS picks the level-1 problems timed (default 1-5; `1-100` for the whole level).
With $KERNELBLASTER_BENCH_REPORT_DIR set, the suite's report (Markdown, HTML, PNGs) is also written there.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest
from fixtures.suite.gpu_suite import EXAMPLES, PROBLEMS, candidate, gpu_services
from fixtures.suite.scripted_suite import suite_config
from gpu.cases import KERNELBENCH

from kernelblaster.eval.baseline import run_baselines
from kernelblaster.eval.problems import parse_ranges, select_problems
from kernelblaster.eval.report import write_report
from kernelblaster.eval.results import DATABASE_NAME, ResultsDB
from kernelblaster.eval.runner import start_suite

pytestmark = pytest.mark.gpu


def _gpus() -> tuple[int, ...]:
    import torch

    return tuple(range(min(torch.cuda.device_count(), 2)))


def test_a_three_problem_suite_finds_the_fast_kernels_learns_them_in_order_and_reports(tmp_path: Path) -> None:
    listing = tmp_path / "suite.txt"
    listing.write_text("".join(f"{EXAMPLES / 'problems' / name}.py\n" for name in PROBLEMS))
    gpus = _gpus()
    root = tmp_path / "suite"

    start_suite(root, suite_config(select_problems(listing), window=len(gpus), gpus=gpus,
                                   context={"iterations": 1, "trajectories": 1, "depth": 1}), gpu_services)

    db = ResultsDB.open(root / DATABASE_NAME)
    rows, versions = db.problems(), db.versions()
    db.close()
    for row, name in zip(rows, PROBLEMS, strict=True):
        result = row.result
        assert row.status == "done" and result is not None and result.verdict == "ok", (name, result)
        assert result.best_sha256 == hashlib.sha256(candidate(name, "fast").encode()).hexdigest(), name
        assert result.vs_initial is not None and result.vs_initial > 1.0, name
        assert result.eager_ms and result.compile_ms and result.best_ms and result.vs_baseline, name
        assert result.roofline_fraction is not None and 0 < result.roofline_fraction <= 1, name
    assert [v.position for v in versions] == [None, 0, 1, 2]
    assert versions[-1].measured == versions[0].measured + 3
    written = write_report(root, [], Path(os.environ.get("KERNELBLASTER_BENCH_REPORT_DIR", root / "report")))
    assert all(path.stat().st_size > 0 for path in written)


def test_bench_baseline_times_kernelbench_level_1_beside_the_published_h100_times(tmp_path: Path) -> None:
    if not (KERNELBENCH / "level1").is_dir():
        pytest.skip(f"no KernelBench checkout at {KERNELBENCH} (set KERNELBLASTER_KERNELBENCH)")
    numbers = parse_ranges(os.environ.get("KERNELBLASTER_BASELINE_PROBLEMS", "1-5"))
    problems = select_problems(KERNELBENCH, [1], numbers)

    report = run_baselines(tmp_path / "baselines", problems, _gpus(), "strict",
                           KERNELBENCH / "baseline_times" / "H100_Modal", sys.stdout)

    db = ResultsDB.open(tmp_path / "baselines" / DATABASE_NAME)
    rows = db.baselines()
    db.close()
    assert len(rows) == len(problems)
    for row in rows:
        assert row.error is None and row.eager_ms and row.eager_ms > 0, row
        assert row.published_eager_ms and row.published_compile_ms, row
    print(report.read_text())
