"""A problem's analysis kept on disk (harness/analysis.py, issue 27): a later process (`eval` runs one per
candidate) reads it back instead of running the forward pass again; a changed problem, a damaged entry or one
made under another key is analysed anew, and a problem whose pass fails is never stored."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelblaster.harness import analysis
from kernelblaster.harness.analysis import ProblemAnalysis, analyse_problem, analysis_path
from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions
from kernelblaster.harness.problem import Problem, ProblemError, load_problem

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "problems"
ROOT = Path(__file__).resolve().parents[2]


class Passes:
    """Counts the forward passes the analysis runs (each one a cache miss)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        anew: Callable[[Problem, int | None], ProblemAnalysis] = analysis._analyse_anew

        def counted(problem: Problem, gpu: int | None) -> ProblemAnalysis:
            self.count += 1
            return anew(problem, gpu)

        monkeypatch.setattr(analysis, "_analyse_anew", counted)
        self.monkeypatch = monkeypatch

    def new_process(self) -> None:
        """Forget what this process analysed, as a fresh `eval` process would not know it."""
        self.monkeypatch.setattr(analysis, "_ANALYSES", {})


def copied(tmp_path: Path, name: str = "tiny_linear.py") -> Path:
    """The fixture copied, so that a test may change it (and no other test's in-process analysis is used)."""
    copy = tmp_path / "problems" / name
    copy.parent.mkdir(exist_ok=True)
    copy.write_text((FIXTURES / name).read_text() + f"\n# {tmp_path.name}\n")
    return copy


def test_a_later_process_reads_the_analysis_back_instead_of_running_the_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    passes, problem = Passes(monkeypatch), copied(tmp_path, "layer_norm_kernelbench_40.py")
    first = analyse_problem(load_problem(problem), None, tmp_path / "cache")
    passes.new_process()
    again = analyse_problem(load_problem(problem), None, tmp_path / "cache")
    assert passes.count == 1
    assert again is not first and again == first  # read back whole: spec, footprint, device, operations, rows
    assert first.rows and first.operations


def test_a_changed_problem_file_is_analysed_anew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    passes, problem = Passes(monkeypatch), copied(tmp_path)
    analyse_problem(load_problem(problem), None, tmp_path / "cache")
    passes.new_process()
    problem.write_text(problem.read_text().replace("8", "12"))
    changed = analyse_problem(load_problem(problem), None, tmp_path / "cache")
    assert passes.count == 2
    assert changed.spec.problem_sha256 == load_problem(problem).sha256


def test_a_damaged_entry_is_analysed_anew_and_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    passes, problem = Passes(monkeypatch), load_problem(copied(tmp_path))
    first = analyse_problem(problem, None, tmp_path / "cache")
    entry = analysis_path(problem, None, tmp_path / "cache")
    entry.write_bytes(entry.read_bytes()[:40] + b"\xff\x00 not json")
    passes.new_process()
    assert analyse_problem(problem, None, tmp_path / "cache") == first
    assert passes.count == 2
    passes.new_process()
    analyse_problem(problem, None, tmp_path / "cache")
    assert passes.count == 2  # the entry was written again, whole


def test_an_entry_made_under_another_key_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stored entry whose key (torch's version here) is not this process's: its content is never read as this
    # problem's analysis, even where it sits at the path this key names.
    passes, problem = Passes(monkeypatch), load_problem(copied(tmp_path))
    first = analyse_problem(problem, None, tmp_path / "cache")
    entry = analysis_path(problem, None, tmp_path / "cache")
    stored = json.loads(entry.read_text())
    stored["key"] = stored["key"].replace("torch ", "torch 0.0.1-other ")
    stored["spec"]["outputs"][0]["shape"] = [1]
    entry.write_text(json.dumps(stored))
    passes.new_process()
    assert analyse_problem(problem, None, tmp_path / "cache") == first
    assert passes.count == 2


def test_a_change_to_the_harness_source_makes_a_stored_analysis_stale(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    passes, problem = Passes(monkeypatch), load_problem(copied(tmp_path))
    analyse_problem(problem, None, tmp_path / "cache")
    passes.new_process()
    monkeypatch.setattr(analysis, "_source_digest", lambda: "another-harness")
    analyse_problem(problem, None, tmp_path / "cache")
    assert passes.count == 2


def test_a_problem_whose_pass_fails_is_not_stored_and_fails_every_time(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    passes, problem = Passes(monkeypatch), load_problem(copied(tmp_path, "broken_forward_raises.py"))
    for _ in range(2):
        with pytest.raises(ProblemError, match="the reference forward pass failed"):
            analyse_problem(problem, None, tmp_path / "cache")
    assert passes.count == 2
    assert not analysis_path(problem, None, tmp_path / "cache").exists()


def test_a_cache_that_cannot_be_written_still_gives_the_analysis(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder would be")
    problem = load_problem(copied(tmp_path))
    assert analyse_problem(problem, None, not_a_folder).spec.problem_sha256 == problem.sha256


def test_a_later_evaluator_of_the_same_problem_does_not_run_the_pass_again(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    passes, problem = Passes(monkeypatch), copied(tmp_path)
    options = EvalOptions(cache_dir=tmp_path / "cache")
    first = CandidateEvaluator(load_problem(problem), options)
    passes.new_process()
    later = CandidateEvaluator(load_problem(problem), options)
    assert passes.count == 1
    assert later.header == first.header
