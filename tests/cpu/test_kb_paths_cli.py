"""The KB a user names on the command line: it must exist (a typo never starts a new KB), only the default
location is made on first use or `kb init` makes one, links are written through, modes follow the umask,
and every path that cannot be used is one line with nothing created or changed (issue 9, items 1, 3, 10)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.cli import folder_picture, kernelblaster
from fixtures.graph.recorded_evaluator import EvaluationLog
from fixtures.graph.scenario import PROBLEM

from kernelblaster.kb.codec import decode
from kernelblaster.kb.diff import EXCERPT_CHARS
from kernelblaster.kb.paths import seed_kb_bytes
from kernelblaster.kb.store import KnowledgeBase, read_document

SEED = decode(Path("seed_kb.json"), seed_kb_bytes()).document


@pytest.fixture(autouse=True)
def isolated_default_kb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KERNELBLASTER_KB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.mark.parametrize("command", ["stats", "show", "reindex", "export -"])
def test_a_kb_path_that_does_not_exist_is_one_line_and_no_kb_is_made(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    finished = kernelblaster(capsys, "kb", *command.split(), "--kb", "typo_kb.json")
    assert finished.status == 2
    assert finished.error_line == ("KB file typo_kb.json: does not exist (create a new KB there with "
                                   "`kernelblaster kb init typo_kb.json`)")
    assert folder_picture(tmp_path) == {}


def test_a_kb_named_by_the_environment_must_exist_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELBLASTER_KB", str(tmp_path / "typo.json"))
    assert "typo.json: does not exist" in kernelblaster(capsys, "kb", "stats").error_line
    assert folder_picture(tmp_path) == {}


def test_the_default_kb_is_made_from_the_seed_on_first_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kernelblaster(capsys, "kb", "stats").status == 0
    assert read_document(tmp_path / "data" / "kernelblaster" / "kb.json") == SEED


def test_kb_init_makes_a_kb_from_the_seed_and_never_replaces_one(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert kernelblaster(capsys, "kb", "init", "mine.json").out == "created mine.json from the seed KB\n"
    assert read_document(tmp_path / "mine.json") == SEED
    (tmp_path / "mine.json").write_text("{}")
    again = kernelblaster(capsys, "kb", "init", "mine.json")
    assert again.status == 2 and "already exists" in again.error_line
    assert (tmp_path / "mine.json").read_text() == "{}"


@pytest.mark.parametrize(("kb", "complaint"), [
    (".", "KB file .: is a directory, not a file"),
    ("missing_dir/kb.json", "KB file missing_dir/kb.json: does not exist"),
    ("/proc/kb.json", "KB file /proc/kb.json: does not exist"),
    ("", "--kb '': an empty path; leave the flag out to use the default"),
])
def test_a_kb_path_that_cannot_be_a_kb_is_one_line(kb: str, complaint: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    finished = kernelblaster(capsys, "kb", "stats", "--kb", kb)
    assert finished.status == 2
    assert finished.error_line.startswith(complaint)
    assert folder_picture(tmp_path) == {}


def test_a_kb_that_is_not_json_is_one_line_and_left_as_it_is(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.cu").write_text("")
    before = folder_picture(tmp_path)
    finished = kernelblaster(capsys, "kb", "stats", "--kb", "empty.cu")
    assert finished.status == 2 and "empty.cu: not valid JSON at line 1 column 1" in finished.error_line
    assert folder_picture(tmp_path) == before


def test_a_kb_nested_a_hundred_thousand_levels_deep_is_one_line(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    before = folder_picture(tmp_path)
    for command in (["kb", "stats", "--kb", "deep.json"], ["kb", "diff", "deep.json"], ["kb", "import", "deep.json"]):
        finished = kernelblaster(capsys, *command)
        assert finished.status == 2 and "deep.json: nested too deeply to be a KB" in finished.error_line
    assert folder_picture(tmp_path) == before


@pytest.mark.parametrize(("destination", "complaint"), [
    ("/proc/x.json", "cannot write /proc/x.json: "),
    ("kb.json/inside.json", "cannot write kb.json/inside.json: its folder kb.json is a file"),
    ("kb.json/more/inside.json", "cannot write kb.json/more/inside.json: its folder kb.json/more cannot be created: "
                                 "kb.json is a file"),
    ("/", "cannot write /: it is a directory"),
    (".", "cannot write .: it is a directory"),
])
def test_exporting_where_nothing_can_be_written_is_one_line(destination: str, complaint: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    KnowledgeBase.create(tmp_path / "kb.json")
    before = folder_picture(tmp_path)
    finished = kernelblaster(capsys, "kb", "export", destination, "--kb", "kb.json")
    assert finished.status == 2 and finished.error_line.startswith(complaint)
    assert folder_picture(tmp_path) == before


def test_exporting_over_an_existing_file_is_refused_without_force(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    KnowledgeBase.create(tmp_path / "kb.json")
    (tmp_path / "precious.json").write_text("precious")
    finished = kernelblaster(capsys, "kb", "export", "precious.json", "--kb", "kb.json")
    assert finished.status == 2
    assert finished.error_line == "cannot write precious.json: it exists (add --force to replace it)"
    assert (tmp_path / "precious.json").read_text() == "precious"


def test_exporting_with_force_replaces_an_existing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    KnowledgeBase.create(tmp_path / "kb.json")
    (tmp_path / "old.json").write_text("old")
    assert kernelblaster(capsys, "kb", "export", "old.json", "--kb", "kb.json", "--force").status == 0
    assert (tmp_path / "old.json").read_bytes() == (tmp_path / "kb.json").read_bytes()


def test_exporting_onto_a_device_is_refused_even_with_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    KnowledgeBase.create(tmp_path / "kb.json")
    finished = kernelblaster(capsys, "kb", "export", "/dev/null", "--kb", "kb.json", "--force")
    assert finished.status == 2 and "it exists and is not a regular file" in finished.error_line
    assert Path("/dev/null").is_char_device()


def test_a_kb_that_is_a_symbolic_link_is_written_through_and_stays_a_link(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    KnowledgeBase.create(tmp_path / "real.json")
    (tmp_path / "link.json").symlink_to("real.json")
    other = KnowledgeBase.create(tmp_path / "other.json")
    other.document.states.popitem()
    other.replace_document(other.document)

    assert kernelblaster(capsys, "kb", "import", "other.json", "--kb", "link.json").status == 0
    assert (tmp_path / "link.json").is_symlink()
    assert KnowledgeBase.load(tmp_path / "real.json").document == KnowledgeBase.load(tmp_path / "other.json").document


def test_kb_files_get_the_mode_the_umask_asks_for(tmp_path: Path, umask_022: None,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    kernelblaster(capsys, "kb", "init", "kb.json")
    kernelblaster(capsys, "kb", "export", "copy.json", "--kb", "kb.json")
    for name in ("kb.json", "copy.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644


def test_kb_diff_shows_a_changed_state_name_description_and_signature(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    kb = KnowledgeBase.create(tmp_path / "kb.json")
    snapshot = kb.write_snapshot("run-1", 0)
    state_id, state = next(iter(kb.document.states.items()))
    kb.document.states[state_id] = state.model_copy(update={
        "name": "renamed", "description": "described anew", "signature": [0.5] * len(state.signature)})
    kb.replace_document(kb.document)
    out = kernelblaster(capsys, "kb", "diff", snapshot, "--kb", "kb.json").out
    assert out.startswith(f"~ state {state_id}: name: {state.name} -> renamed; description: ")
    assert "-> described anew" in out and "signature changed" in out


def test_kb_diff_shows_where_a_long_description_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kb = KnowledgeBase.create(tmp_path / "kb.json")
    snapshot = kb.write_snapshot("run-1", 0)
    state_id, state = next(iter(kb.document.states.items()))
    kb.document.states[state_id] = state.model_copy(update={"description": state.description + " Edited."})
    kb.replace_document(kb.document)
    out = kernelblaster(capsys, "kb", "diff", snapshot, "--kb", "kb.json").out
    old_end, new_end = state.description[-EXCERPT_CHARS:], (state.description + " Edited.")[-EXCERPT_CHARS:]
    assert out == f"~ state {state_id}: description: ...{old_end} -> ...{new_end}\n"


def test_reindex_where_a_file_holds_the_index_path_is_one_line_naming_it_and_leaves_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    KnowledgeBase.create(tmp_path / "kb.json")
    (tmp_path / "kb.chroma").write_text("not an index: the user's file")
    finished = kernelblaster(capsys, "kb", "reindex", "--kb", "kb.json")
    assert finished.status == 2
    assert finished.error_line.startswith(f"the KB's signature index {tmp_path / 'kb.chroma'} is a file; ")
    assert (tmp_path / "kb.chroma").read_text() == "not an index: the user's file"


def test_optimize_where_a_file_holds_the_index_path_is_refused_before_the_run_directory_is_made(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    KnowledgeBase.create(tmp_path / "kb.json")
    (tmp_path / "kb.chroma").write_text("not an index: the user's file")
    finished = kernelblaster(capsys, "optimize", PROBLEM, "--llm", "human", "--kb", "kb.json", "--run-dir", "run")
    assert finished.status == 2
    assert finished.error_line.startswith(f"the KB's signature index {tmp_path / 'kb.chroma'} is a file; ")
    assert not (tmp_path / "run").exists()
