"""KB snapshots stay useful and bounded: compressed, every iteration of the most recent runs, the last one of
each older run; snapshots from before compression are still read and get compressed."""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from fixtures.cli import folder_picture, kernelblaster
from fixtures.kb.lookup import optimization_of

from kernelblaster.kb.codec import encode
from kernelblaster.kb.outcomes import EventId, OutcomeEvent
from kernelblaster.kb.paths import snapshot_folder_for
from kernelblaster.kb.schema import OutcomeStatus
from kernelblaster.kb.snapshots import DEFAULT_POLICY, SnapshotPolicy, trim
from kernelblaster.kb.store import KnowledgeBase, read_document, trim_snapshots

STATE = "memory_bandwidth_bound"
TECHNIQUE = "kernel_fusion"


def learn(kb: KnowledgeBase, run_id: str, iteration: int) -> None:
    kb.record_outcome(OutcomeEvent(event_id=EventId(run_id=run_id, iteration=iteration, trajectory=0, step=0),
                                   state_id=STATE, technique=TECHNIQUE, status=OutcomeStatus.MEASURED, speedup=1.2))


def attempts(kb: KnowledgeBase) -> int:
    return optimization_of(kb.document.states[STATE], TECHNIQUE).stats.attempts


def run(kb: KnowledgeBase, run_id: str, iterations: int, policy: SnapshotPolicy = DEFAULT_POLICY) -> None:
    """A run that learns one outcome per iteration and snapshots the KB after each."""
    for iteration in range(iterations):
        learn(kb, run_id, iteration)
        kb.write_snapshot(run_id, iteration, policy)


def test_a_snapshot_is_the_kb_compressed(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    learn(kb, "run-1", 0)

    path = kb.write_snapshot("run-1", 0)

    assert path.name == "iteration-0000.json.gz"
    assert gzip.decompress(path.read_bytes()) == (tmp_path / "kb.json").read_bytes()
    assert path.stat().st_size < (tmp_path / "kb.json").stat().st_size / 3
    assert read_document(path) == kb.document


def test_the_most_recent_runs_keep_every_iteration_and_older_runs_their_last(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    for run_id in ("run-a", "run-b", "run-c"):
        run(kb, run_id, 3, SnapshotPolicy(keep_runs=2))

    assert kb.snapshots() == {"run-a": [2], "run-b": [0, 1, 2], "run-c": [0, 1, 2]}


def test_snapshots_grow_by_one_per_run_beyond_the_recent_runs(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    for number in range(12):
        run(kb, f"run-{number:02d}", 4, SnapshotPolicy(keep_runs=3))

    files = list(snapshot_folder_for(kb.path).rglob("iteration-*"))
    assert len(files) == 3 * 4 + (12 - 3)
    assert all(path.name.endswith(".json.gz") for path in files)


def test_the_run_being_written_is_never_trimmed_even_if_another_wrote_later(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    run(kb, "run-b", 2, SnapshotPolicy(keep_runs=2))
    run(kb, "run-a", 1, SnapshotPolicy(keep_runs=2))
    later = snapshot_folder_for(kb.path) / "run-a" / "iteration-0000.json.gz"
    os.utime(later, ns=(later.stat().st_atime_ns, later.stat().st_mtime_ns + 10**12))

    kb.write_snapshot("run-b", 2, SnapshotPolicy(keep_runs=1))

    assert kb.snapshots() == {"run-a": [0], "run-b": [0, 1, 2]}


def test_an_older_runs_last_snapshot_still_restores_the_kb_it_left(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    run(kb, "run-a", 3, SnapshotPolicy(keep_runs=1))
    run(kb, "run-b", 2, SnapshotPolicy(keep_runs=1))

    kb.restore_snapshot("run-a", 2)

    assert attempts(kb) == 3
    assert attempts(KnowledgeBase.load(tmp_path / "kb.json")) == 3


def test_uncompressed_snapshots_of_earlier_versions_are_read_and_compressed_when_trimmed(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    legacy = snapshot_folder_for(kb.path) / "run-old"
    legacy.mkdir(parents=True)
    for iteration in range(2):
        learn(kb, "run-old", iteration)
        (legacy / f"iteration-{iteration:04d}.json").write_bytes(encode(kb.document))
    assert kb.snapshots() == {"run-old": [0, 1]}

    run(kb, "run-new", 1, SnapshotPolicy(keep_runs=1))

    assert kb.snapshots() == {"run-new": [0], "run-old": [1]}
    assert [path.name for path in legacy.iterdir()] == ["iteration-0001.json.gz"]
    kb.restore_snapshot("run-old", 1)
    assert attempts(kb) == 2


def test_trimming_keeps_the_order_of_runs_when_it_compresses_old_snapshots(tmp_path: Path) -> None:
    folder = tmp_path / "kb.snapshots"
    for age, run_id in enumerate(("newest", "older", "oldest")):
        (folder / run_id).mkdir(parents=True)
        for iteration in range(2):
            path = folder / run_id / f"iteration-{iteration:04d}.json"
            path.write_bytes(b"{}")
            os.utime(path, ns=(0, (10 - age) * 10**12 + iteration))

    trim(folder, SnapshotPolicy(keep_runs=2))
    trim(folder, SnapshotPolicy(keep_runs=1))

    assert sorted(str(path.relative_to(folder)) for path in folder.rglob("iteration-*")) == [
        "newest/iteration-0000.json.gz", "newest/iteration-0001.json.gz", "older/iteration-0001.json.gz",
        "oldest/iteration-0001.json.gz"]


def test_trimming_a_kb_without_snapshots_creates_nothing(tmp_path: Path) -> None:
    trim_snapshots(tmp_path / "work" / "kb.json", SnapshotPolicy(keep_runs=0))
    assert not (tmp_path / "work").exists()


def test_a_negative_number_of_runs_to_keep_is_refused() -> None:
    with pytest.raises(ValueError, match="keep_runs"):
        SnapshotPolicy(keep_runs=-1)


@pytest.mark.parametrize("damage", [
    pytest.param(lambda data: data[:len(data) // 2], id="gzip-cut-short"),
    pytest.param(lambda data: gzip.compress(b'{"version": '), id="invalid-json"),
])
def test_a_restore_refused_for_a_damaged_snapshot_writes_nothing(
        damage: Callable[[bytes], bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    snapshot = kb.write_snapshot("run-a", 0)
    snapshot.write_bytes(damage(snapshot.read_bytes()))
    learn(kb, "run-a", 1)
    before = folder_picture(tmp_path)

    finished = kernelblaster(capsys, "kb", "restore", "run-a", "--kb", kb.path)

    assert finished.status == 2
    assert finished.error_line.startswith(f"KB file {snapshot}: ")
    assert folder_picture(tmp_path) == before
