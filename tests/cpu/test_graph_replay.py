"""Record and replay: a run's `llm.jsonl` answers a later run by role and key, reproducing its decisions
without an endpoint; a prompt the recording has no answer for stops the run in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixtures.graph.fake_openai import FakeOpenAI, kernelblaster_roles, optimize_through
from fixtures.graph.recorded_evaluator import EvaluationLog, RecordedEvaluator, recorded_evaluators
from fixtures.graph.scenario import PROBLEM

from kernelblaster.graph.app.cli import main
from kernelblaster.graph.core import services
from kernelblaster.kb.store import KnowledgeBase

SHAPE = ["--iterations", "1", "--trajectories", "1", "--top-k", "3"]


pytestmark = pytest.mark.usefixtures("recorded_harness")


def _record(tmp_path: Path, depth: int = 2) -> Path:
    """A run against the server that met a refused tool call and an unfenced answer on its way."""
    with FakeOpenAI(kernelblaster_roles, quirks=["refuse_tools", "unfenced_code"]) as server:
        outcome = optimize_through(server, tmp_path / "recorded", depth=depth)
    assert outcome.best_source is not None
    return tmp_path / "recorded" / "run"


def _replay(tmp_path: Path, recorded: Path, depth: int = 2) -> int:
    kb_path = tmp_path / "replayed-kb.json"
    if not kb_path.exists():
        KnowledgeBase.create(kb_path)
    return main(["optimize", str(PROBLEM), "--llm", "replay", "--replay-from", str(recorded), *SHAPE,
                 "--depth", str(depth), "--kb", str(kb_path), "--run-dir", str(tmp_path / "replayed" / "another-name")])


def _report(run_dir: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((run_dir / "report.json").read_text())
    return report


def _decisions(report: dict[str, Any]) -> list[tuple[object, ...]]:
    return [(s["state_id"], s["technique"], s["outcome"], s["attempts"], s["speedup"]) for s in report["steps"]]


def test_a_replay_reproduces_the_recorded_runs_decisions_without_an_endpoint(tmp_path: Path) -> None:
    recorded = _record(tmp_path)
    assert _replay(tmp_path, recorded) == 0
    replayed = tmp_path / "replayed" / "another-name"
    assert _decisions(_report(replayed)) == _decisions(_report(recorded))
    assert len(_report(recorded)["steps"]) == 2
    assert (replayed / "best.cu").read_text() == (recorded / "best.cu").read_text()
    assert _report(replayed)["tokens"] == _report(recorded)["tokens"]


def test_a_replay_of_a_run_recorded_before_operation_kinds_were_kept_is_offered_what_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RecordedEvaluator, "operation_kinds", lambda self: None)  # as such runs recorded
    recorded = _record(tmp_path)
    monkeypatch.undo()
    monkeypatch.setattr(services, "harness_evaluator", recorded_evaluators(EvaluationLog()))
    assert _replay(tmp_path, recorded) == 0
    assert _decisions(_report(tmp_path / "replayed" / "another-name")) == _decisions(_report(recorded))


def test_a_replay_asked_a_prompt_the_recording_has_no_answer_for_stops_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorded = _record(tmp_path, depth=1)
    assert _replay(tmp_path, recorded, depth=2) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "has no answer for the state_extractor prompt i0-t0-s1.extract_state" in error


@pytest.mark.parametrize(("recording", "error_line"), [
    (None, "--replay-from {folder}: no llm.jsonl there to replay (every run against an endpoint records one)"),
    ('{"role": "lowering"}\n{"not": "an exchange"}\n', "{folder}/llm.jsonl:1: not a recorded exchange"),
    ("", "--replay-from {folder}: {folder}/llm.jsonl holds no recorded exchange to replay"),
], ids=["missing", "damaged", "empty"])
def test_a_recording_that_cannot_be_replayed_is_refused_in_one_line_before_the_run_directory_is_made(
        recording: str | None, error_line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if recording is not None:
        (tmp_path / "llm.jsonl").write_text(recording)
    assert _replay(tmp_path, tmp_path) == 2
    assert capsys.readouterr().err == f"kernelblaster: {error_line.format(folder=tmp_path)}\n"
    assert not (tmp_path / "replayed").exists()
