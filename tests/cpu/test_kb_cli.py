"""`kernelblaster kb stats|show|export|import|reindex|diff|restore` on the seed KB and on a corrupted copy."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.kb.lookup import optimization_of

from kernelblaster.graph.app.cli import main
from kernelblaster.kb.edits import Deprecate
from kernelblaster.kb.outcomes import EventId, OutcomeEvent
from kernelblaster.kb.schema import OutcomeStatus
from kernelblaster.kb.store import KnowledgeBase


@pytest.fixture
def kb_path(tmp_path: Path) -> Path:
    """A KB made from the seed, as `kernelblaster kb init` makes one."""
    return KnowledgeBase.create(tmp_path / "kb.json").path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_stats_json_reports_counts_size_and_arches(capsys: pytest.CaptureFixture[str], kb_path: Path) -> None:
    status, out, _ = run(capsys, "kb", "stats", "--kb", str(kb_path), "--json")
    stats = json.loads(out)
    assert status == 0
    assert stats["states"] >= 5
    assert stats["optimizations"] >= 30
    assert stats["bytes"] == kb_path.stat().st_size
    assert stats["arches"] == []


def test_stats_say_what_pruning_removed(capsys: pytest.CaptureFixture[str], kb_path: Path) -> None:
    KnowledgeBase.load(kb_path).apply_edits(
        [Deprecate(state_id="memory_bandwidth_bound", technique="streaming_stores", reason="never measurable")]
    )
    _, out, _ = run(capsys, "kb", "stats", "--kb", str(kb_path))
    assert "pruned: 1 optimization, 0 states, 0 transitions so far" in out
    assert "latest: memory_bandwidth_bound/streaming_stores" in out
    _, out, _ = run(capsys, "kb", "stats", "--kb", str(kb_path), "--json")
    assert json.loads(out)["pruned"]["recent"] == ["memory_bandwidth_bound/streaming_stores"]


def test_kb_location_comes_from_the_environment_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kb_path: Path
) -> None:
    monkeypatch.setenv("KERNELBLASTER_KB", str(kb_path))
    _, out, _ = run(capsys, "kb", "stats", "--json")
    assert json.loads(out)["path"] == str(kb_path)


def test_show_lists_every_state(capsys: pytest.CaptureFixture[str], kb_path: Path) -> None:
    _, out, _ = run(capsys, "kb", "show", "--kb", str(kb_path))
    for state_id in KnowledgeBase.load(kb_path).document.states:
        assert state_id in out


def test_show_one_state_lists_its_optimizations(capsys: pytest.CaptureFixture[str], kb_path: Path) -> None:
    _, out, _ = run(capsys, "kb", "show", "launch_overhead_dominated", "--kb", str(kb_path))
    assert "kernel_fusion (fusion; for several_operations) prior 2.00x; untried" in out


def test_show_unknown_state_fails_with_a_hint(capsys: pytest.CaptureFixture[str], kb_path: Path) -> None:
    status, _, err = run(capsys, "kb", "show", "nowhere", "--kb", str(kb_path))
    assert status == 2
    assert "no state 'nowhere'" in err


def test_export_then_import_round_trips_and_keeps_the_previous_kb(
    capsys: pytest.CaptureFixture[str], kb_path: Path, tmp_path: Path
) -> None:
    exported = tmp_path / "exported.json"
    run(capsys, "kb", "export", str(exported), "--kb", str(kb_path))
    other = KnowledgeBase.create(tmp_path / "other.json").path
    before = other.read_bytes()
    status, out, _ = run(capsys, "kb", "import", str(exported), "--kb", str(other), "--json")
    assert status == 0
    assert KnowledgeBase.load(other).document == KnowledgeBase.load(kb_path).document
    assert Path(json.loads(out)["previous_kept_as"]).read_bytes() == before


def test_every_import_keeps_its_own_backup_named_by_time(capsys: pytest.CaptureFixture[str], kb_path: Path,
                                                         tmp_path: Path) -> None:
    exported = tmp_path / "exported.json"
    run(capsys, "kb", "export", str(exported), "--kb", str(kb_path))
    target = KnowledgeBase.create(tmp_path / "target.json").path
    kept: dict[Path, bytes] = {}
    for _ in range(2):
        before = target.read_bytes()
        _, out, _ = run(capsys, "kb", "import", str(exported), "--kb", str(target), "--json")
        kept[Path(json.loads(out)["previous_kept_as"])] = before
    assert len(kept) == 2 and all(path.read_bytes() == content for path, content in kept.items())
    assert sorted(path.name for path in tmp_path.glob("target.pre-import.*.bak.json")) == sorted(p.name for p in kept)
    assert all(re.fullmatch(r"target\.pre-import\.\d{8}T\d{6}Z(-\d+)?\.bak\.json", path.name) for path in kept)


def test_reindex_reports_the_states_indexed(capsys: pytest.CaptureFixture[str], kb_path: Path) -> None:
    _, out, _ = run(capsys, "kb", "reindex", "--kb", str(kb_path), "--json")
    assert json.loads(out)["indexed"] == len(KnowledgeBase.load(kb_path).document.states)


def test_diff_shows_what_an_outcome_changed(capsys: pytest.CaptureFixture[str], kb_path: Path) -> None:
    kb = KnowledgeBase.load(kb_path)
    snapshot = kb.write_snapshot("run-1", 0)
    kb.record_outcome(
        OutcomeEvent(
            event_id=EventId(run_id="run-1", iteration=0, trajectory=0, step=0),
            state_id="compute_bound_fp32",
            technique="register_tiling",
            status=OutcomeStatus.MEASURED,
            speedup=1.25,
        )
    )
    _, out, _ = run(capsys, "kb", "diff", str(snapshot), "--kb", str(kb_path))
    assert out.strip() == "~ compute_bound_fp32/register_tiling: attempts 0 -> 1; geomean - -> 1.25x"


def test_diff_of_identical_kbs_says_so(capsys: pytest.CaptureFixture[str], kb_path: Path) -> None:
    KnowledgeBase.load(kb_path)
    _, out, _ = run(capsys, "kb", "diff", str(kb_path), str(kb_path))
    assert out.strip() == "no differences"


def test_corrupted_kb_fails_with_one_line_naming_file_and_place_and_stays_untouched(
    capsys: pytest.CaptureFixture[str], kb_path: Path
) -> None:
    KnowledgeBase.load(kb_path)
    corrupted = kb_path.read_text().replace('"prior_speedup":2.0', '"prior_speedup":"fast"', 1)
    kb_path.write_text(corrupted)
    for command in ("stats", "show", "reindex"):
        status, _, err = run(capsys, "kb", command, "--kb", str(kb_path))
        assert status == 2
        assert err.count("\n") == 1
        assert str(kb_path) in err
        assert "states.compute_bound_fp32.optimizations[0].prior_speedup" in err
    assert kb_path.read_text() == corrupted


def test_import_of_an_invalid_file_changes_nothing(
    capsys: pytest.CaptureFixture[str], kb_path: Path, tmp_path: Path
) -> None:
    KnowledgeBase.load(kb_path)
    before = kb_path.read_bytes()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    status, _, err = run(capsys, "kb", "import", str(bad), "--kb", str(kb_path))
    assert status == 2
    assert "bad.json: not valid JSON at line 1 column 2" in err
    assert kb_path.read_bytes() == before


def test_command_line_entry_point_exits_non_zero_on_a_broken_kb(kb_path: Path) -> None:
    kb_path.write_text('{"schema_version": 1')
    result = subprocess.run(
        [sys.executable, "-m", "kernelblaster.graph", "kb", "stats", "--kb", str(kb_path)],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONWARNINGS": "ignore"},
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"kernelblaster: KB file {kb_path}: not valid JSON")


@pytest.mark.parametrize("command", [["kb", "export", "-"], ["kb", "show"], ["kb", "stats", "--json"]])
def test_output_into_a_pipe_whose_reader_is_gone_ends_quietly(command: list[str], kb_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `kernelblaster kb export - | head -1` leaves it once head has its line
    try:
        result = subprocess.run([sys.executable, "-m", "kernelblaster.graph", *command, "--kb", str(kb_path)],
                                stdout=write_end, stderr=subprocess.PIPE, text=True, check=False)
    finally:
        os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == 141


def _learn_over_two_iterations(kb_path: Path) -> KnowledgeBase:
    """Run `run-1` taught the KB one outcome per iteration and snapshotted it after each; then one more."""
    kb = KnowledgeBase.load(kb_path)
    for step in range(3):
        kb.record_outcome(OutcomeEvent(event_id=EventId(run_id="run-1", iteration=0, trajectory=0, step=step),
                                       state_id="compute_bound_fp32", technique="register_tiling",
                                       status=OutcomeStatus.MEASURED, speedup=1.25))
        if step < 2:
            kb.write_snapshot("run-1", step)
    return kb


def _attempts(kb_path: Path) -> int:
    document = KnowledgeBase.load(kb_path).document
    return optimization_of(document.states["compute_bound_fp32"], "register_tiling").stats.attempts


def test_restore_lists_the_snapshots_kept_numbering_iterations_as_reports_do(
    capsys: pytest.CaptureFixture[str], kb_path: Path
) -> None:
    _learn_over_two_iterations(kb_path)
    _, out, _ = run(capsys, "kb", "restore", "--kb", str(kb_path))
    assert out.strip() == "run-1: after iteration 1, 2"


def test_restore_makes_the_kb_what_it_was_after_that_iteration_and_keeps_the_previous_one(
    capsys: pytest.CaptureFixture[str], kb_path: Path
) -> None:
    _learn_over_two_iterations(kb_path)
    before = kb_path.read_bytes()
    status, out, _ = run(capsys, "kb", "restore", "run-1", "1", "--kb", str(kb_path), "--json")
    summary = json.loads(out)
    assert status == 0
    assert _attempts(kb_path) == 1
    assert Path(summary["previous_kept_as"]).read_bytes() == before


def test_restore_without_an_iteration_takes_the_runs_last_snapshot(
    capsys: pytest.CaptureFixture[str], kb_path: Path
) -> None:
    _learn_over_two_iterations(kb_path)
    run(capsys, "kb", "restore", "run-1", "--kb", str(kb_path))
    assert _attempts(kb_path) == 2


def test_restore_of_a_snapshot_not_kept_fails_in_one_line_naming_those_kept_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], kb_path: Path
) -> None:
    _learn_over_two_iterations(kb_path)
    before = kb_path.read_bytes()
    for argv in (["run-1", "3"], ["run-2"]):
        status, _, err = run(capsys, "kb", "restore", *argv, "--kb", str(kb_path))
        assert status == 2
        assert err.count("\n") == 1 and "kept: run-1: after iteration 1, 2" in err
    assert kb_path.read_bytes() == before


def test_importing_an_empty_json_object_says_it_is_not_a_kb_and_keeps_the_kb(capsys: pytest.CaptureFixture[str],
                                                                            kb_path: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    before = kb_path.read_bytes()
    status, _, err = run(capsys, "kb", "import", str(empty), "--kb", str(kb_path))
    assert status != 0 and err.count("\n") == 1 and "Traceback" not in err
    assert "it is an empty JSON object ({}), not a KB" in err and "None" not in err
    assert kb_path.read_bytes() == before
