"""`kernelblaster bench ...` from the command line: bad input gets one clear line and a non-zero exit, and
nothing is written; the command group itself loads nothing heavy. Also `bench baseline`'s comparison."""

from __future__ import annotations

import hashlib
import io
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from fixtures.graph.recorded_evaluator import EvaluationLog, recorded_evaluators
from fixtures.suite.scripted_suite import KERNELBENCH, services_factory, suite_config

from kernelblaster.eval.baseline import BaselineJob, measure_baseline, run_baselines
from kernelblaster.eval.problems import select_problems
from kernelblaster.eval.results import DATABASE_NAME, SCHEMA_VERSION, ResultsDB
from kernelblaster.eval.suite import create_suite
from kernelblaster.graph.app.cli import main
from kernelblaster.graph.core.services import Services
from kernelblaster.kb.precision import PrecisionPolicy
from kernelblaster.tools.errors import UserFacingError


def _fails_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str], expected: str) -> None:
    status = main(argv)
    error = capsys.readouterr().err
    assert status == 2, error
    assert error.count("\n") == 1 and expected in error, error


@pytest.mark.parametrize(("arguments", "expected"), [
    (["--level", "4"], "has levels 1, 2"),
    (["--level", "1,,2"], "expected level numbers like 1,2"),
    (["--level", ""], "expected level numbers like 1,2"),
    (["--problems", ""], "not a number or a range"),
    (["--problems", "300-310"], "no problem numbered 300"),
    (["--problems", "x-y"], "not a number or a range"),
    (["--problems", "1-99999999999"], "spans more than 100,000 problem numbers"),
    (["--llm", "human"], "--llm human"),
])
def test_bad_suite_selections_and_options_are_one_line_errors_that_write_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], expected: str) -> None:
    _fails_in_one_line(["bench", "run", str(KERNELBENCH), "--out", str(tmp_path / "suite"), *arguments], capsys,
                       expected)
    assert not (tmp_path / "suite").exists()


def test_an_empty_suite_directory_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    _fails_in_one_line(["bench", "run", str(tmp_path / "empty"), "--out", str(tmp_path / "suite")], capsys,
                       "no problems found")
    assert not (tmp_path / "suite").exists()


def test_a_suite_without_an_endpoint_is_refused_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    _fails_in_one_line(["bench", "run", str(KERNELBENCH), "--out", str(tmp_path / "suite")], capsys, "OPENAI_API_KEY")
    assert not (tmp_path / "suite").exists()


def test_resuming_or_reporting_a_directory_that_is_no_suite_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails_in_one_line(["bench", "resume", str(tmp_path)], capsys, "not a suite directory")
    _fails_in_one_line(["bench", "report", str(tmp_path)], capsys, "not a suite directory")


def test_a_suite_written_by_a_newer_version_is_refused_untouched(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / DATABASE_NAME
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    for command in ("resume", "report"):
        _fails_in_one_line(["bench", command, str(tmp_path)], capsys, "newer kernelblaster")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest and not (tmp_path / "report").exists()


def test_the_bench_command_group_loads_no_heavy_module() -> None:
    probe = ("import sys, argparse, kernelblaster.eval.cli as c; c.add_commands(argparse.ArgumentParser()"
             ".add_subparsers()); print(sorted(m for m in ('torch', 'langgraph', 'matplotlib', 'ray', 'chromadb') "
             "if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def _refusing_services() -> Services:
    raise AssertionError("a baseline already measured was measured again")


def test_baselines_are_compared_with_the_published_times_and_not_measured_twice(tmp_path: Path) -> None:
    problems = select_problems(KERNELBENCH)
    published = KERNELBENCH / "baseline_times" / "H100_Modal"
    report = run_baselines(tmp_path / "baselines", problems, [0, 1], "strict", published, sys.stdout,
                           services_factory())

    again = run_baselines(tmp_path / "baselines", problems, [0], "strict", published, sys.stdout, _refusing_services)

    db = ResultsDB.open(tmp_path / "baselines" / DATABASE_NAME)
    rows = {row.problem_id: row for row in db.baselines()}
    db.close()
    relu = rows["level1/19_ReLU"]
    assert (relu.eager_ms, relu.compile_ms, relu.published_eager_ms, relu.published_compile_ms) == (1.0, 0.8, 4.28,
                                                                                                    4.35)
    assert len(rows) == 5 and all(row.error is None for row in rows.values())
    assert f"| level1/19_ReLU | {relu.gpu} | 1.0000 | 0.8000 | 4.2800 | 4.3500 | 0.23 | 0.18 |" in again.read_text()
    assert report == again


def test_baselines_timed_under_another_precision_policy_are_refused_untouched(tmp_path: Path) -> None:
    problems = select_problems(KERNELBENCH)
    published = KERNELBENCH / "baseline_times" / "H100_Modal"
    run_baselines(tmp_path / "baselines", problems[:2], [0], "strict", published, sys.stdout, services_factory())
    before = hashlib.sha256((tmp_path / "baselines" / DATABASE_NAME).read_bytes()).hexdigest()

    with pytest.raises(UserFacingError, match="timed under --precision strict; time pytorch-default into another"):
        run_baselines(tmp_path / "baselines", problems, [0], "pytorch-default", published, sys.stdout,
                      _refusing_services)

    assert hashlib.sha256((tmp_path / "baselines" / DATABASE_NAME).read_bytes()).hexdigest() == before


def test_bench_baseline_times_a_problem_afresh_rather_than_reading_a_cached_figure() -> None:
    log = EvaluationLog()
    problem = select_problems(KERNELBENCH, levels=[1])[0]
    job = BaselineJob(problem=problem, precision="strict", published_eager_ms=None, published_compile_ms=None)

    row = measure_baseline(job, Services(evaluators=recorded_evaluators(log)), lambda event: None, "gpu0")

    assert row.error is None and row.eager_ms is not None
    assert log.calls == [("baseline remeasured", Path(problem.path).stem)]


def test_bench_baseline_of_a_fully_timed_directory_writes_its_comparison_without_a_gpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "baselines"
    run_baselines(out, select_problems(KERNELBENCH, levels=[1]), [0], "strict",
                  KERNELBENCH / "baseline_times" / "H100_Modal", sys.stdout, services_factory())
    (out / "baseline.md").unlink()

    status = main(["bench", "baseline", str(KERNELBENCH), "--level", "1", "--out", str(out)])

    assert status == 0, capsys.readouterr().err
    assert "| level1/19_ReLU |" in (out / "baseline.md").read_text()


def test_bench_baseline_ends_with_the_geometric_means_against_the_published_times(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = _timed_baselines(tmp_path / "baselines", count=3)
    capsys.readouterr()

    assert main(["bench", "baseline", str(KERNELBENCH), "--level", "1", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith("Geometric mean of here / published: eager ")


def test_bench_baseline_with_problems_left_to_time_needs_a_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _fails_in_one_line(["bench", "baseline", str(KERNELBENCH), "--out", str(tmp_path / "baselines")], capsys,
                       "no CUDA GPU is visible")


def test_bench_baseline_without_a_gpu_says_why_in_its_own_terms_naming_no_flag_it_lacks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    status = main(["bench", "baseline", str(KERNELBENCH), "--level", "1", "--out", str(tmp_path / "baselines")])
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1, error
    assert "timing the PyTorch baselines" in error and "--ray" not in error
    assert not (tmp_path / "baselines").exists()


def test_bench_run_with_parallel_but_no_ray_is_refused_in_one_line_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails_in_one_line(["bench", "run", str(KERNELBENCH), "--out", str(tmp_path / "suite"), "--parallel", "4"],
                       capsys, "--parallel 4 needs --ray")
    assert not (tmp_path / "suite").exists()


class _InterruptedAfterFirstLine(io.StringIO):
    """Standard output of a run that is stopped (Ctrl-C) once the first problem's line is printed."""

    def write(self, text: str) -> int:
        raise KeyboardInterrupt


def test_an_interrupted_bench_baseline_leaves_the_comparison_of_what_it_timed(tmp_path: Path) -> None:
    problems = select_problems(KERNELBENCH)
    with pytest.raises(KeyboardInterrupt):
        run_baselines(tmp_path / "baselines", problems, [0], "strict", KERNELBENCH / "baseline_times" / "H100_Modal",
                      _InterruptedAfterFirstLine(), services_factory())

    table = (tmp_path / "baselines" / "baseline.md").read_text()
    assert f"| {problems[0].id} |" in table and f"| {problems[1].id} |" not in table


def test_bench_baseline_against_a_directory_without_published_times_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails_in_one_line(["bench", "baseline", str(KERNELBENCH), "--out", str(tmp_path / "baselines"),
                        "--published", str(tmp_path / "no_such_dir")], capsys, "holds no KernelBench baseline times")
    assert not (tmp_path / "baselines").exists()


def _timed_baselines(root: Path, count: int = 1, precision: PrecisionPolicy = "strict",
                     services: Callable[[], Services] | None = None) -> Path:
    run_baselines(root, select_problems(KERNELBENCH)[:count], [0], precision,
                  KERNELBENCH / "baseline_times" / "H100_Modal", io.StringIO(), services or services_factory())
    return root


@pytest.mark.parametrize("command", ["resume", "report"])
@pytest.mark.parametrize("count", [1, 0])
def test_resuming_or_reporting_a_baselines_directory_says_it_holds_baselines_not_a_suite(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, count: int) -> None:
    root = _timed_baselines(tmp_path / "baselines", count)
    _fails_in_one_line(["bench", command, str(root)], capsys, "holds the PyTorch baselines of `kernelblaster bench "
                                                              "baseline`, not a suite")


def test_resuming_a_suite_with_problems_left_where_no_gpu_is_visible_is_refused_and_changes_no_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    root = tmp_path / "suite"
    create_suite(root, suite_config()).db.close()
    before = (root / DATABASE_NAME).read_bytes()
    _fails_in_one_line(["bench", "resume", str(root)], capsys, "no CUDA GPU is visible")
    assert (root / DATABASE_NAME).read_bytes() == before


@pytest.mark.parametrize("command", ["resume", "report"])
def test_a_results_file_that_is_not_a_database_is_refused_untouched(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    (tmp_path / DATABASE_NAME).write_bytes(b"garbage, not SQLite")
    _fails_in_one_line(["bench", command, str(tmp_path)], capsys, "not a kernelblaster results database")
    assert (tmp_path / DATABASE_NAME).read_bytes() == b"garbage, not SQLite"


def test_someone_elses_sqlite_database_is_refused_untouched(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with sqlite3.connect(tmp_path / DATABASE_NAME) as other:
        other.execute("CREATE TABLE meta (anything TEXT)")
    other.close()
    before = (tmp_path / DATABASE_NAME).read_bytes()
    _fails_in_one_line(["bench", "report", str(tmp_path)], capsys, "not a kernelblaster results database")
    assert (tmp_path / DATABASE_NAME).read_bytes() == before


def test_a_suite_whose_configuration_record_is_damaged_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "suite"
    create_suite(root, suite_config()).db.close()
    with sqlite3.connect(root / DATABASE_NAME) as db:
        db.execute("UPDATE meta SET value = '{\"broken\": 1}' WHERE key = 'config'")
    db.close()
    _fails_in_one_line(["bench", "report", str(root)], capsys, "its config record is damaged")


def test_a_suite_is_not_created_in_a_baselines_directory(tmp_path: Path) -> None:
    root = _timed_baselines(tmp_path / "baselines")
    with pytest.raises(UserFacingError, match=r"holds the PyTorch baselines .*; give the suite another --out"):
        create_suite(root, suite_config())


def test_a_baselines_directory_keeps_its_policy_before_anything_is_timed(tmp_path: Path) -> None:
    root = _timed_baselines(tmp_path / "baselines", count=0)
    with pytest.raises(UserFacingError, match="timed under --precision strict"):
        _timed_baselines(root, precision="pytorch-default", services=_refusing_services)


def test_baselines_are_not_timed_into_a_suites_directory(tmp_path: Path) -> None:
    create_suite(tmp_path / "suite", suite_config()).db.close()
    with pytest.raises(UserFacingError, match="holds a suite of `kernelblaster bench run`"):
        _timed_baselines(tmp_path / "suite", services=_refusing_services)


def test_each_timed_baseline_says_how_many_are_done_and_the_time_left(tmp_path: Path) -> None:
    out = io.StringIO()
    run_baselines(tmp_path / "baselines", select_problems(KERNELBENCH)[:2], [0], "strict",
                  KERNELBENCH / "baseline_times" / "H100_Modal", out, services_factory())
    first, second = out.getvalue().splitlines()
    assert first.startswith("[1/2, ~") and " left] level" in first
    assert second.startswith("[2/2] level")
