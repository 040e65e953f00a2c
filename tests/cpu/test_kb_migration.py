"""A KB written by schema version 0 is migrated on load, with the original kept beside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelblaster.kb.errors import KBFileError
from kernelblaster.kb.paths import backup_path_for
from kernelblaster.kb.schema import SCHEMA_VERSION
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
    stats = KnowledgeBase.load(v0_path).document.states["bandwidth"].optimization("vector_loads").stats
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
