"""Reading KB files: round trips, one-line errors that name the file and the place, files left untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelblaster.kb.codec import decode, encode
from kernelblaster.kb.errors import KBFileError
from kernelblaster.kb.store import KnowledgeBase


@pytest.fixture
def kb_path(tmp_path: Path) -> Path:
    path = tmp_path / "kb.json"
    KnowledgeBase.load(path)
    return path


def test_encode_then_decode_gives_back_the_same_document(kb_path: Path) -> None:
    document = KnowledgeBase.load(kb_path).document
    assert decode(kb_path, encode(document)).document == document


def test_saved_file_has_one_line_per_state_and_per_optimization(kb_path: Path) -> None:
    document = KnowledgeBase.load(kb_path).document
    lines = [line.strip() for line in kb_path.read_text().splitlines()]
    optimizations = sum(len(state.optimizations) for state in document.states.values())
    assert sum(line.startswith('{"technique":') for line in lines) == optimizations
    assert sum(f'"{state_id}":{{"id":' in line for line in lines for state_id in document.states) == len(
        document.states
    )


def test_a_replaced_document_round_trips_through_the_file(kb_path: Path) -> None:
    kb = KnowledgeBase.load(kb_path)
    kb.document.states["memory_bandwidth_bound"].optimizations[0].lessons.append("Fusing the epilogue paid off.")
    kb.replace_document(kb.document)
    assert KnowledgeBase.load(kb_path).document == kb.document


def test_invalid_json_is_reported_with_file_line_and_column(kb_path: Path) -> None:
    kb_path.write_text('{\n "schema_version": 1,\n "states": {oops}\n}')
    with pytest.raises(KBFileError, match=r"kb\.json: not valid JSON at line 3 column 13"):
        KnowledgeBase.load(kb_path)


def test_a_control_character_in_a_string_is_reported_without_a_dangling_word(kb_path: Path) -> None:
    kb_path.write_text('{"schema_version": "a\tb"}')
    with pytest.raises(KBFileError, match=r"column 22: Invalid control character$"):
        KnowledgeBase.load(kb_path)


def test_schema_violation_is_reported_with_its_location(kb_path: Path) -> None:
    data = json.loads(kb_path.read_text())
    data["states"]["compute_bound_fp32"]["optimizations"][1]["prior_speedup"] = 0
    kb_path.write_text(json.dumps(data))
    with pytest.raises(KBFileError, match=r"states\.compute_bound_fp32\.optimizations\[1\]\.prior_speedup"):
        KnowledgeBase.load(kb_path)


def test_reference_to_unknown_technique_is_reported(kb_path: Path) -> None:
    data = json.loads(kb_path.read_text())
    data["states"]["compute_bound_fp32"]["optimizations"][0]["technique"] = "warp_magic"
    kb_path.write_text(json.dumps(data))
    with pytest.raises(KBFileError, match="unknown technique warp_magic"):
        KnowledgeBase.load(kb_path)


def test_error_message_is_a_single_line(kb_path: Path) -> None:
    kb_path.write_text("[1, 2")
    with pytest.raises(KBFileError) as caught:
        KnowledgeBase.load(kb_path)
    assert "\n" not in str(caught.value)


def test_kb_built_with_another_signature_layout_is_refused(kb_path: Path) -> None:
    data = json.loads(kb_path.read_text())
    data["signature_fields"] = data["signature_fields"][:-1]
    kb_path.write_text(json.dumps(data))
    with pytest.raises(KBFileError, match=r"signature_fields .*23 fields.* differ from this version's layout"):
        KnowledgeBase.load(kb_path)


def test_a_newer_schema_version_is_refused_with_advice_to_upgrade(kb_path: Path) -> None:
    data = json.loads(kb_path.read_text())
    data["schema_version"] = 7
    kb_path.write_text(json.dumps(data))
    with pytest.raises(KBFileError, match=r"schema version 7, newer than this kernelblaster reads \(versions 0, 1 "
                                          r"and 2\): upgrade"):
        KnowledgeBase.load(kb_path)


def test_a_file_naming_no_schema_version_is_refused_in_words(kb_path: Path) -> None:
    kb_path.write_text(json.dumps({"states": {}}))
    with pytest.raises(KBFileError, match="names no schema version") as refused:
        KnowledgeBase.load(kb_path)
    assert "None" not in str(refused.value)


def test_a_broken_file_is_left_untouched_and_not_replaced_by_the_seed(kb_path: Path) -> None:
    broken = b'{"schema_version": 1, "states": '
    kb_path.write_bytes(broken)
    with pytest.raises(KBFileError):
        KnowledgeBase.load(kb_path)
    assert kb_path.read_bytes() == broken


def test_missing_file_without_seeding_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(KBFileError, match=r"absent\.json: does not exist"):
        KnowledgeBase.load(tmp_path / "absent.json", create_from_seed=False)
