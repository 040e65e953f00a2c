"""The KB file as shared, durable state: where it lives, snapshots, replays, concurrent and killed writers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fixtures.kb.lookup import optimization_of

from kernelblaster.kb.codec import decode, encode
from kernelblaster.kb.errors import KBFileError
from kernelblaster.kb.outcomes import EventId, OutcomeEvent
from kernelblaster.kb.paths import default_kb_path, seed_kb_bytes
from kernelblaster.kb.schema import SCHEMA_VERSION, OutcomeStatus, PerformanceState
from kernelblaster.kb.store import KnowledgeBase, read_document

STATE = "memory_bandwidth_bound"
TECHNIQUE = "kernel_fusion"


def measured(run_id: str, step: int, speedup: float = 1.3) -> OutcomeEvent:
    return OutcomeEvent(
        event_id=EventId(run_id=run_id, iteration=0, trajectory=0, step=step),
        state_id=STATE,
        technique=TECHNIQUE,
        status=OutcomeStatus.MEASURED,
        speedup=speedup,
    )


def attempts(kb: KnowledgeBase) -> int:
    return optimization_of(kb.document.states[STATE], TECHNIQUE).stats.attempts


def test_first_use_installs_the_shipped_seed_in_the_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "new" / "kb.json"
    KnowledgeBase.load(path)
    assert read_document(path) == decode(Path("seed_kb.json"), seed_kb_bytes()).document
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION
    assert sorted(child.name for child in path.parent.iterdir()) == ["kb.json", "kb.json.lock"]


def test_environment_variable_overrides_the_default_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KERNELBLASTER_KB", str(tmp_path / "mine.json"))
    assert default_kb_path() == tmp_path / "mine.json"


def test_default_location_is_in_the_user_data_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KERNELBLASTER_KB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_kb_path() == tmp_path / "kernelblaster" / "kb.json"


def test_replayed_event_is_counted_once(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    assert kb.record_outcome(measured("run-1", 0)) is True
    assert kb.record_outcome(measured("run-1", 0)) is False
    assert attempts(kb) == 1


def test_replay_after_reopening_the_kb_is_still_counted_once(tmp_path: Path) -> None:
    KnowledgeBase.load(tmp_path / "kb.json").record_outcome(measured("run-1", 0))
    resumed = KnowledgeBase.load(tmp_path / "kb.json")
    assert resumed.record_outcome(measured("run-1", 0)) is False
    assert attempts(resumed) == 1


def test_a_change_merges_with_what_another_instance_wrote(tmp_path: Path) -> None:
    first = KnowledgeBase.load(tmp_path / "kb.json")
    second = KnowledgeBase.load(tmp_path / "kb.json")
    first.record_outcome(measured("run-a", 0))
    second.record_outcome(measured("run-b", 0))
    assert attempts(second) == 2
    assert attempts(KnowledgeBase.load(tmp_path / "kb.json")) == 2


def test_snapshot_restores_the_kb_as_it_was_at_that_iteration(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    kb.record_outcome(measured("run-1", 0))
    kb.write_snapshot("run-1", 0)
    kb.record_outcome(measured("run-1", 1))
    kb.restore_snapshot("run-1", 0)
    assert attempts(kb) == 1
    assert attempts(KnowledgeBase.load(tmp_path / "kb.json")) == 1


def test_restoring_a_snapshot_that_was_never_written_names_it(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    with pytest.raises(KBFileError, match="no snapshot of run run-9 iteration 3"):
        kb.restore_snapshot("run-9", 3)


def test_snapshot_run_id_cannot_escape_the_snapshot_folder(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    with pytest.raises(ValueError, match="run id"):
        kb.write_snapshot("../elsewhere", 0)


_WRITER = textwrap.dedent(
    """
    import sys
    from kernelblaster.kb.outcomes import EventId, OutcomeEvent
    from kernelblaster.kb.store import KnowledgeBase

    path, run_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    kb = KnowledgeBase.load(path)
    for step in range(count):
        kb.record_outcome(OutcomeEvent(
            event_id=EventId(run_id=run_id, iteration=0, trajectory=0, step=step),
            state_id="memory_bandwidth_bound", technique="kernel_fusion", status="measured", speedup=1.1,
        ))
    """
)


def test_two_writer_processes_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "kb.json"
    KnowledgeBase.load(path)
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), run_id, "30"]) for run_id in ("left", "right")
    ]
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    document = KnowledgeBase.load(path).document
    assert optimization_of(document.states[STATE], TECHNIQUE).stats.attempts == 60
    all_thirty_steps = [[(1 << 30) - 1]]
    assert document.applied_steps == {"left": all_thirty_steps, "right": all_thirty_steps}


_SLOW_SAVER = textwrap.dedent(
    """
    from kernelblaster.kb.store import KnowledgeBase
    import sys

    kb = KnowledgeBase.load(sys.argv[1])
    kb.document.states["memory_bandwidth_bound"].description = "Rewritten by the writer that gets killed."
    while True:
        kb.replace_document(kb.document)
    """
)


def _large_kb(path: Path, states: int) -> None:
    kb = KnowledgeBase.load(path)
    template = kb.document.states[STATE]
    for number in range(states):
        copy = template.model_copy(deep=True, update={"id": f"state-{number}"})
        kb.document.states[copy.id] = PerformanceState.model_validate(copy.model_dump())
    kb.replace_document(kb.document)


def test_writer_killed_mid_write_leaves_the_previous_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "kb.json"
    _large_kb(path, 3000)
    original = path.read_bytes()
    writer = subprocess.Popen([sys.executable, "-c", _SLOW_SAVER, str(path)])
    try:
        _wait_for_partial_write(path, writer)
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    assert any(tmp_path.glob(".kb.json.*.partial")), "the writer was killed between writes, not during one"
    survivor = KnowledgeBase.load(path)
    assert path.read_bytes() == original or "Rewritten" in survivor.document.states[STATE].description


def test_next_write_clears_what_a_killed_writer_left(tmp_path: Path) -> None:
    path = tmp_path / "kb.json"
    abandoned = tmp_path / ".kb.json.abc123.partial"
    abandoned.write_bytes(b'{"half": ')
    kb = KnowledgeBase.load(path)
    kb.replace_document(kb.document)
    assert not abandoned.exists()
    assert path.read_bytes() == encode(kb.document)


def _wait_for_partial_write(path: Path, writer: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and writer.poll() is None:
        if any(path.parent.glob(f".{path.name}.*.partial")):
            return
        time.sleep(0.0005)
    pytest.fail("the writer never got as far as a partial write")
