"""Files that are not UTF-8 text, or gzip files cut short, are refused in one line naming the file, with a
user error's exit status and nothing written: a problem, a candidate, a suite's list of problems, a run's
report, a recording to replay, a prices file, a KB snapshot."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from fixtures.cli import Finished, folder_picture, kernelblaster
from fixtures.graph.recorded_evaluator import EvaluationLog
from fixtures.graph.scenario import PROBLEM

from kernelblaster.kb.store import KnowledgeBase

NOT_UTF8 = b"\xff\xfe not UTF-8\n"
USER_ERROR = 2


pytestmark = pytest.mark.usefixtures("fresh_cli_directory")


def not_utf8_file(path: Path) -> Path:
    path.write_bytes(NOT_UTF8)
    return path


def assert_refused_naming(finished: Finished, path: Path | str) -> None:
    assert finished.status == USER_ERROR, finished.err
    assert str(path) in finished.error_line


# ---- problem files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["header"], ["baseline"], ["eval", "candidate.cu"]])
def test_a_problem_file_that_is_not_utf8_is_one_line(command: list[str], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "candidate.cu").write_text("// a candidate\n")
    problem = not_utf8_file(tmp_path / "problem.py")
    finished = kernelblaster(capsys, command[0], problem, *command[1:])
    assert_refused_naming(finished, problem)
    assert "not UTF-8" in finished.error_line


def test_optimizing_a_problem_file_that_is_not_utf8_is_one_line_before_the_run_directory(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    KnowledgeBase.create(tmp_path / "kb.json")
    problem = not_utf8_file(tmp_path / "problem.py")
    finished = kernelblaster(capsys, "optimize", problem, "--llm", "human", "--kb", "kb.json", "--run-dir", "run")
    assert_refused_naming(finished, problem)
    assert not (tmp_path / "run").exists()


# ---- candidates ------------------------------------------------------------------------------------------


def test_a_candidate_that_is_not_utf8_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    candidate = not_utf8_file(tmp_path / "candidate.cu")
    finished = kernelblaster(capsys, "eval", PROBLEM, candidate, "--no-baseline")
    assert_refused_naming(finished, candidate)
    assert "not UTF-8" in finished.error_line


# ---- suite list files ------------------------------------------------------------------------------------


def test_a_suite_list_file_that_is_not_utf8_is_one_line_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    problems = not_utf8_file(tmp_path / "problems.txt")
    finished = kernelblaster(capsys, "bench", "baseline", problems, "--out", tmp_path / "baselines")
    assert_refused_naming(finished, problems)
    assert not (tmp_path / "baselines").exists()


# ---- run reports -----------------------------------------------------------------------------------------


def test_a_run_report_that_is_not_utf8_is_one_line_and_left_as_it_is(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    KnowledgeBase.create(tmp_path / "kb.json")
    assert kernelblaster(capsys, "optimize", PROBLEM, "--llm", "human", "--kb", "kb.json", "--iterations", "1",
                         "--trajectories", "1", "--depth", "1", "--run-dir", "run").status == 0
    report = not_utf8_file(tmp_path / "run" / "report.md")
    finished = kernelblaster(capsys, "report", tmp_path / "run")
    assert_refused_naming(finished, report)
    assert report.read_bytes() == NOT_UTF8


# ---- recordings to replay --------------------------------------------------------------------------------


def test_a_recording_that_is_not_utf8_is_one_line_naming_it_and_left_as_it_is(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    KnowledgeBase.create(tmp_path / "kb.json")
    (tmp_path / "recorded").mkdir()
    recording = not_utf8_file(tmp_path / "recorded" / "llm.jsonl")
    finished = kernelblaster(capsys, "optimize", PROBLEM, "--llm", "replay", "--replay-from", tmp_path / "recorded",
                             "--kb", "kb.json", "--iterations", "1", "--trajectories", "1", "--depth", "1",
                             "--run-dir", "run")
    assert_refused_naming(finished, recording)
    assert recording.read_bytes() == NOT_UTF8


# ---- prices files ----------------------------------------------------------------------------------------


def test_a_prices_file_that_is_not_utf8_is_one_line_naming_it_before_the_run_directory(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    KnowledgeBase.create(tmp_path / "kb.json")
    prices = not_utf8_file(tmp_path / "prices.toml")
    finished = kernelblaster(capsys, "optimize", PROBLEM, "--llm", "human", "--kb", "kb.json", "--prices", prices,
                             "--run-dir", "run")
    assert_refused_naming(finished, prices)
    assert "not UTF-8" in finished.error_line
    assert not (tmp_path / "run").exists()


# ---- KB snapshots ----------------------------------------------------------------------------------------


def truncated_gzip(kb: Path, path: Path) -> Path:
    path.write_bytes(gzip.compress(kb.read_bytes())[:2000])
    return path


def test_diffing_a_truncated_gzip_kb_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kb = KnowledgeBase.create(tmp_path / "kb.json").path
    finished = kernelblaster(capsys, "kb", "diff", "--kb", kb, truncated_gzip(kb, tmp_path / "damaged.json.gz"))
    assert finished.status == USER_ERROR
    assert "not a valid gzip file: damaged or cut short" in finished.error_line


def test_a_truncated_gzip_kb_is_named_in_the_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kb = KnowledgeBase.create(tmp_path / "kb.json").path
    damaged = truncated_gzip(kb, tmp_path / "damaged.json.gz")
    assert_refused_naming(kernelblaster(capsys, "kb", "diff", "--kb", kb, damaged), damaged)


def test_importing_a_truncated_gzip_kb_is_one_line_and_leaves_the_kb_unchanged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kb = KnowledgeBase.create(tmp_path / "kb.json").path
    damaged = truncated_gzip(kb, tmp_path / "damaged.json.gz")
    before = folder_picture(tmp_path)
    finished = kernelblaster(capsys, "kb", "import", damaged, "--kb", kb)
    assert finished.status == USER_ERROR
    assert "not a valid gzip file" in finished.error_line
    assert folder_picture(tmp_path) == before


def test_restoring_a_damaged_snapshot_is_one_line_naming_it_and_leaves_the_kb_unchanged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kb = KnowledgeBase.create(tmp_path / "kb.json")
    snapshot = kb.write_snapshot("run-1", 0)
    snapshot.write_bytes(snapshot.read_bytes()[:-8])  # the gzip trailer lost
    before = kb.path.read_bytes()
    finished = kernelblaster(capsys, "kb", "restore", "run-1", "1", "--kb", kb.path)
    assert_refused_naming(finished, snapshot)
    assert kb.path.read_bytes() == before
