"""A KB written by an older schema version (0 or 1) is migrated on load, with the original kept beside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fixtures.kb.lookup import optimization_of, transition_of
from pydantic import TypeAdapter

from kernelblaster.kb.codec import encode
from kernelblaster.kb.errors import KBFileError
from kernelblaster.kb.outcomes import EventId, OutcomeEvent
from kernelblaster.kb.paths import backup_path_for
from kernelblaster.kb.schema import SCHEMA_VERSION, STATS_FIELDS, OutcomeStats, OutcomeStatus
from kernelblaster.kb.store import KnowledgeBase

V0_FIXTURE = Path(__file__).parents[1] / "fixtures" / "kb" / "kb_v0.json"


@pytest.fixture
def v0_path(tmp_path: Path) -> Path:
    path = tmp_path / "kb.json"
    shutil.copyfile(V0_FIXTURE, path)
    return path


def test_v0_file_is_rewritten_in_the_current_schema(v0_path: Path) -> None:
    KnowledgeBase.load(v0_path)
    assert json.loads(v0_path.read_text())["schema_version"] == SCHEMA_VERSION


def test_v0_original_is_kept_byte_for_byte_beside_the_kb(v0_path: Path) -> None:
    KnowledgeBase.load(v0_path)
    assert backup_path_for(v0_path, "v0").read_bytes() == V0_FIXTURE.read_bytes()


def test_v0_speedup_lists_become_counts_and_a_geometric_mean(v0_path: Path) -> None:
    stats = optimization_of(KnowledgeBase.load(v0_path).document.states["bandwidth"], "vector_loads").stats
    assert (stats.attempts, stats.verify_failures, stats.measured, stats.wins) == (4, 1, 3, 2)
    assert stats.geomean_speedup == pytest.approx((1.21 * 1.44 * 0.9) ** (1 / 3))
    assert stats.best_speedup == pytest.approx(1.44)


def test_v0_inline_techniques_become_one_catalogue_entry_each(v0_path: Path) -> None:
    document = KnowledgeBase.load(v0_path).document
    assert sorted(document.techniques) == ["fusion", "vector_loads"]
    assert document.techniques["vector_loads"].category == "memory"


def test_v0_single_arch_becomes_the_arch_list(v0_path: Path) -> None:
    states = KnowledgeBase.load(v0_path).document.states
    assert (states["bandwidth"].arches, states["fp32_compute"].arches) == (["sm_80"], [])


def test_loading_a_migrated_kb_again_keeps_the_first_backup(v0_path: Path) -> None:
    KnowledgeBase.load(v0_path)
    migrated = v0_path.read_bytes()
    KnowledgeBase.load(v0_path)
    assert v0_path.read_bytes() == migrated
    assert backup_path_for(v0_path, "v0").read_bytes() == V0_FIXTURE.read_bytes()


def test_malformed_v0_file_is_reported_and_left_as_it_was(v0_path: Path) -> None:
    broken = V0_FIXTURE.read_text().replace('"expected_speedup": 1.3', '"expected_speedup": -1.3')
    v0_path.write_text(broken)
    with pytest.raises(KBFileError, match=r"states\[0\]\.optimizations\[0\]\.expected_speedup"):
        KnowledgeBase.load(v0_path)
    assert v0_path.read_text() == broken
    assert not backup_path_for(v0_path, "v0").exists()


V1_FIXTURE = Path(__file__).parents[1] / "fixtures" / "kb" / "kb_v1.json"
# v1 wrote statistics as objects with these names; read one the way v1 did.
V1_STATS = TypeAdapter(OutcomeStats)


@pytest.fixture
def v1_path(tmp_path: Path) -> Path:
    path = tmp_path / "kb.json"
    shutil.copyfile(V1_FIXTURE, path)
    return path


def v1_records() -> dict[str, Any]:
    records: dict[str, Any] = json.loads(V1_FIXTURE.read_text())
    return records


def test_v1_file_is_rewritten_in_the_current_schema(v1_path: Path) -> None:
    KnowledgeBase.load(v1_path)
    data = json.loads(v1_path.read_text())
    assert (data["schema_version"], data["stats_fields"]) == (SCHEMA_VERSION, list(STATS_FIELDS))


def test_v1_original_is_kept_byte_for_byte_beside_the_kb(v1_path: Path) -> None:
    KnowledgeBase.load(v1_path)
    assert backup_path_for(v1_path, "v1").read_bytes() == V1_FIXTURE.read_bytes()


def test_v1_statistics_are_carried_over_exactly(v1_path: Path) -> None:
    document = KnowledgeBase.load(v1_path).document
    old = v1_records()
    for state_id, state in old["states"].items():
        for optimization in state["optimizations"]:
            stats = optimization_of(document.states[state_id], optimization["technique"]).stats
            assert stats == V1_STATS.validate_python(optimization.get("stats", {})), optimization["technique"]
    for transition in old["transitions"]:
        assert transition_of(document, transition["before"], transition["after"]).stats == V1_STATS.validate_python(
            transition["stats"]
        )


def test_v1_content_other_than_statistics_and_event_ids_passes_through(v1_path: Path) -> None:
    migrated = json.loads(encode(KnowledgeBase.load(v1_path).document))
    old = v1_records()
    for record in [*old["transitions"], *[o for s in old["states"].values() for o in s["optimizations"]]]:
        record.pop("stats", None)
    for record in [*migrated["transitions"], *[o for s in migrated["states"].values() for o in s["optimizations"]]]:
        record.pop("stats", None)
    for key in ("signature_fields", "techniques", "states", "transitions", "state_aliases"):
        assert migrated[key] == old[key], key


def test_v1_event_ids_still_refuse_their_replays(v1_path: Path) -> None:
    kb = KnowledgeBase.load(v1_path)
    replays = [replayed_event(run_id, key) for run_id, keys in v1_records()["applied_events"].items() for key in keys]
    assert kb.record_outcomes(replays) == [False] * len(replays)
    assert kb.record_outcomes([replayed_event("run-a", "0.1.1"), replayed_event("run-c", "0.0.0")]) == [True, True]


def replayed_event(run_id: str, step_key: str) -> OutcomeEvent:
    iteration, trajectory, step = map(int, step_key.split("."))
    return OutcomeEvent(
        event_id=EventId(run_id=run_id, iteration=iteration, trajectory=trajectory, step=step),
        state_id="memory_bandwidth_bound", technique="kernel_fusion", status=OutcomeStatus.CRASHED,
    )


def test_malformed_v1_file_is_reported_and_left_as_it_was(v1_path: Path) -> None:
    broken = V1_FIXTURE.read_text().replace('"0.1.2"', '"0.1"')
    v1_path.write_text(broken)
    with pytest.raises(KBFileError, match=r"applied_events\.run-a\[4\]"):
        KnowledgeBase.load(v1_path)
    assert v1_path.read_text() == broken
    assert not backup_path_for(v1_path, "v1").exists()


def test_v1_statistics_that_do_not_add_up_are_reported_where_they_are(v1_path: Path) -> None:
    v1_path.write_text(V1_FIXTURE.read_text().replace('"attempts":4,', '"attempts":5,', 1))
    with pytest.raises(KBFileError, match=r"states\.memory_bandwidth_bound\.optimizations\[0\]\.stats: .*attempts"):
        KnowledgeBase.load(v1_path)
