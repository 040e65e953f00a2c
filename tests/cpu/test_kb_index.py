"""Nearest-state retrieval on a real Chroma store: cosine distance, arch preference, rebuilds, no embedding."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelblaster.kb.edits import AddState
from kernelblaster.kb.index import COLLECTION_NAME, CROSS_ARCH_PENALTY, SignatureIndex, content_hash
from kernelblaster.kb.paths import index_directory_for
from kernelblaster.kb.schema import PerformanceState
from kernelblaster.kb.store import KnowledgeBase

MEMORY = "memory_bandwidth_bound"


@pytest.fixture
def kb(tmp_path: Path) -> KnowledgeBase:
    return KnowledgeBase.load(tmp_path / "kb.json")


def twin_of(kb: KnowledgeBase, state_id: str, new_id: str, arches: list[str]) -> PerformanceState:
    original = kb.document.states[state_id]
    return PerformanceState.model_validate(original.model_dump() | {"id": new_id, "arches": arches})


def nudged(signature: list[float], field: int, delta: float) -> list[float]:
    return [value + delta if index == field else value for index, value in enumerate(signature)]


def test_a_seed_state_is_its_own_nearest_neighbour(kb: KnowledgeBase) -> None:
    for state in kb.document.states.values():
        [match] = kb.nearest_states(state.signature, "sm_90", 1)
        assert match.state.id == state.id
        assert match.distance == pytest.approx(0.0, abs=1e-4)


def test_matches_come_nearest_first_with_cosine_distances(kb: KnowledgeBase) -> None:
    query = nudged(kb.document.states[MEMORY].signature, 0, 0.2)
    matches = kb.nearest_states(query, "sm_90", 4)
    assert len(matches) == 4
    assert matches[0].state.id == MEMORY
    assert [m.distance for m in matches] == sorted(m.distance for m in matches)
    assert all(0.0 <= m.distance <= 2.0 for m in matches)


def test_same_state_seen_on_the_query_arch_ranks_above_one_seen_elsewhere(kb: KnowledgeBase) -> None:
    kb.apply_edits(
        [
            AddState(state=twin_of(kb, MEMORY, "memory_on_a100", ["sm_80"])),
            AddState(state=twin_of(kb, MEMORY, "memory_on_h100", ["sm_90"])),
        ]
    )
    query = kb.document.states[MEMORY].signature
    on_h100 = [m.state.id for m in kb.nearest_states(query, "sm_90", 3)]
    on_a100 = [m.state.id for m in kb.nearest_states(query, "sm_80", 3)]
    assert on_h100[0] == "memory_on_h100"
    assert on_h100.index("memory_on_a100") > 0
    assert on_a100[0] == "memory_on_a100"


def test_a_much_nearer_state_from_another_arch_outranks_a_distant_local_one(kb: KnowledgeBase) -> None:
    kb.apply_edits(
        [
            AddState(state=twin_of(kb, "compute_bound_fp32", "compute_on_h100", ["sm_90"])),
            AddState(state=twin_of(kb, MEMORY, "memory_on_a100", ["sm_80"])),
        ]
    )
    matches = kb.nearest_states(kb.document.states[MEMORY].signature, "sm_90", len(kb.document.states))
    ranked = [m.state.id for m in matches]
    assert ranked.index("memory_on_a100") < ranked.index("compute_on_h100")
    assert matches[ranked.index("compute_on_h100")].distance > CROSS_ARCH_PENALTY


def test_index_follows_added_and_deprecated_states(kb: KnowledgeBase) -> None:
    query = nudged(kb.document.states[MEMORY].signature, 3, 0.3)
    kb.nearest_states(query, "sm_90", 1)
    kb.apply_edits(
        [
            AddState(
                state=PerformanceState.model_validate(
                    kb.document.states[MEMORY].model_dump() | {"id": "exact_hit", "signature": query}
                )
            )
        ]
    )
    assert kb.nearest_states(query, "sm_90", 1)[0].state.id == "exact_hit"
    kb.apply_edits([{"kind": "deprecate", "state_id": "exact_hit", "reason": "duplicate of the seed state"}])
    assert kb.nearest_states(query, "sm_90", 1)[0].state.id == MEMORY


def test_stale_index_left_by_another_process_is_brought_up_to_date(kb: KnowledgeBase, tmp_path: Path) -> None:
    kb.nearest_states(kb.document.states[MEMORY].signature, "sm_90", 1)
    other = KnowledgeBase.load(tmp_path / "kb.json")
    other.apply_edits([AddState(state=twin_of(other, MEMORY, "added_elsewhere", ["sm_90"]))])
    reopened = KnowledgeBase.load(tmp_path / "kb.json")
    [match] = reopened.nearest_states(reopened.document.states[MEMORY].signature, "sm_90", 1)
    assert match.state.id == "added_elsewhere"


def test_deleted_index_is_rebuilt_from_the_json(kb: KnowledgeBase, tmp_path: Path) -> None:
    kb.nearest_states(kb.document.states[MEMORY].signature, "sm_90", 1)
    shutil.rmtree(index_directory_for(kb.path))
    fresh = KnowledgeBase.load(tmp_path / "kb.json")
    assert fresh.nearest_states(fresh.document.states[MEMORY].signature, "sm_90", 1)[0].state.id == MEMORY


def test_unreadable_index_is_rebuilt_from_the_json(kb: KnowledgeBase, tmp_path: Path) -> None:
    kb.nearest_states(kb.document.states[MEMORY].signature, "sm_90", 1)
    directory = index_directory_for(kb.path)
    shutil.rmtree(directory)
    directory.mkdir()
    (directory / "chroma.sqlite3").write_bytes(b"this is not a database" * 100)
    fresh = KnowledgeBase.load(tmp_path / "kb.json")
    assert fresh.nearest_states(fresh.document.states[MEMORY].signature, "sm_90", 1)[0].state.id == MEMORY


def test_collection_uses_cosine_space_and_stores_the_content_hash(
    kb: KnowledgeBase,
) -> None:
    import chromadb
    from chromadb.config import Settings

    kb.nearest_states(kb.document.states[MEMORY].signature, "sm_90", 1)
    client = chromadb.PersistentClient(
        path=str(index_directory_for(kb.path)), settings=Settings(anonymized_telemetry=False)
    )
    collection = client.get_collection(COLLECTION_NAME, embedding_function=None)
    assert collection.configuration_json["hnsw"]["space"] == "cosine"
    assert collection.metadata["content_hash"] == content_hash(kb.document)


def test_reindex_counts_the_live_states(kb: KnowledgeBase) -> None:
    assert kb.reindex() == len(kb.document.states)


def test_signature_of_the_wrong_length_is_refused(kb: KnowledgeBase) -> None:
    with pytest.raises(ValueError, match="24 values"):
        kb.nearest_states([0.5] * 10, "sm_90", 1)


def test_empty_index_returns_no_matches(tmp_path: Path, kb: KnowledgeBase) -> None:
    index = SignatureIndex(tmp_path / "empty.chroma")
    assert index.query([0.5] * 24, 3) == []
