"""`kernelblaster kb update-catalogue`: a KB made from an older seed gains the fields newer seeds declare for
its techniques (precision policies, operation kinds, snippets), and keeps everything it learned or a person
edited; the previous KB is kept. A run on such a KB is told so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelblaster.graph.app.cli import main
from kernelblaster.graph.app.run_cli import note_outdated_catalogue
from kernelblaster.graph.core.context import RunContext
from kernelblaster.kb.seed_catalogue import describe_gaps
from kernelblaster.kb.store import KnowledgeBase


@pytest.fixture
def old_kb(tmp_path: Path) -> Path:
    """A KB as an older seed made it: no technique carries the newer fields; one description was edited."""
    path = KnowledgeBase.create(tmp_path / "kb.json").path
    data = json.loads(path.read_text())
    for technique in data["techniques"].values():
        for field in ("precision_policies", "applies_to", "snippet"):
            technique.pop(field, None)
    data["techniques"]["welford_norm"]["description"] = "Our own words on Welford statistics, kept as edited."
    path.write_text(json.dumps(data))
    return path


def _update(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["kb", "update-catalogue", "--kb", str(path), "--json"]) == 0
    report: dict[str, object] = json.loads(capsys.readouterr().out)
    return report


def test_an_old_kbs_techniques_gain_the_seeds_operation_kinds_policies_and_snippets(
        old_kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _update(old_kb, capsys)
    techniques = KnowledgeBase.load(old_kb).document.techniques
    assert techniques["welford_norm"].applies_to == ["normalization"]
    assert techniques["welford_norm"].snippet == "welford"
    assert techniques["tensor_core_mma"].precision_policies is not None


def test_what_a_person_edited_is_kept(old_kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _update(old_kb, capsys)
    description = KnowledgeBase.load(old_kb).document.techniques["welford_norm"].description
    assert description == "Our own words on Welford statistics, kept as edited."


def test_the_previous_kb_is_kept_beside_it(old_kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = old_kb.read_text()
    report = _update(old_kb, capsys)
    (backup,) = old_kb.parent.glob(f"{old_kb.stem}.pre-catalogue.*.bak.json")
    assert report["previous_kept_as"] == str(backup) and backup.read_text() == before


def test_a_kb_made_from_this_seed_has_nothing_to_update(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = KnowledgeBase.create(tmp_path / "kb.json").path
    before = path.read_bytes()
    assert _update(path, capsys)["updated"] == {}
    assert path.read_bytes() == before and not list(path.parent.glob("*.bak.json"))


def test_a_run_on_an_old_kb_is_told_to_update_its_catalogue(old_kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    note_outdated_catalogue(RunContext(kb_path=str(old_kb)))
    note = capsys.readouterr().err
    assert note.count("\n") == 1
    assert "operation kinds" in note and "`kernelblaster kb update-catalogue`" in note


def test_a_run_that_reads_no_kb_is_not_told_about_its_catalogue(old_kb: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    note_outdated_catalogue(RunContext(kb_path=str(old_kb), memory="none"))
    assert capsys.readouterr().err == ""


def test_a_run_on_a_kb_made_from_this_seed_is_told_nothing(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    note_outdated_catalogue(RunContext(kb_path=str(KnowledgeBase.create(tmp_path / "kb.json").path)))
    assert capsys.readouterr().err == ""


def test_looking_for_the_note_leaves_an_older_schema_kb_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "kb.json"
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "kb" / "kb_v1.json", path)
    before = path.read_bytes()
    note_outdated_catalogue(RunContext(kb_path=str(path)))
    assert path.read_bytes() == before and [entry.name for entry in tmp_path.iterdir()] == ["kb.json"]


def test_a_kb_lacking_only_snippets_is_not_said_to_offer_more_widely() -> None:
    note = describe_gaps({"welford_norm": ["snippet"]})
    assert note is not None and "snippets" in note and "widely" not in note
