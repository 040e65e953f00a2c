"""ncu's report from a candidate's sandbox is taken out of the folder the candidate could write before
anything reads it (tools/ncu.py `take_report`, `export_candidate_details`): a link, a FIFO, a hard link or
an outsized file in the report's place is refused, and `ncu --import` (a stand-in script here) only ever
sees the trusted copy."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kernelblaster.tools import ncu
from kernelblaster.tools.ncu import NcuFailedError, candidate_report_folder, export_candidate_details, take_report

CSV = '"ID","Kernel Name"\n"0","swish"\n'


@pytest.fixture
def stand_in_ncu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An ncu that records its arguments and prints a small CSV; returns the file its arguments go to."""
    script = tmp_path / "ncu"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > '{tmp_path}/args'\nprintf '{CSV}'\n")
    script.chmod(0o755)
    monkeypatch.setenv(ncu.NCU_ENV_VAR, str(script))
    return tmp_path / "args"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text("the trusted process's own file\n")
    return path


def test_a_report_ncu_wrote_is_imported_from_a_copy_outside_the_candidates_folder(stand_in_ncu: Path) -> None:
    with candidate_report_folder() as folder:
        (folder / "profile.ncu-rep").write_bytes(b"NCU report bytes")
        assert export_candidate_details(folder / "profile") == CSV
        imported = Path(stand_in_ncu.read_text().splitlines()[1])
    assert imported.name == "profile.ncu-rep" and imported.parent != folder
    assert not imported.exists()  # the private copy is gone with its folder


def test_a_symbolic_link_in_the_reports_place_is_refused_and_never_imported(stand_in_ncu: Path,
                                                                             secret: Path) -> None:
    with candidate_report_folder() as folder:
        (folder / "profile.ncu-rep").symlink_to(secret)
        with pytest.raises(NcuFailedError, match="is not a file ncu wrote"):
            export_candidate_details(folder / "profile")
    assert not stand_in_ncu.exists()


def test_a_fifo_in_the_reports_place_is_refused_at_once(stand_in_ncu: Path, tmp_path: Path) -> None:
    with candidate_report_folder() as folder:
        os.mkfifo(folder / "profile.ncu-rep")
        started = time.monotonic()
        with pytest.raises(NcuFailedError, match="is not a regular file"):
            take_report(folder / "profile", tmp_path)
        assert time.monotonic() - started < 5


def test_a_hard_link_to_another_file_is_refused(tmp_path: Path, secret: Path) -> None:
    with candidate_report_folder() as folder:
        os.link(secret, folder / "profile.ncu-rep")
        with pytest.raises(NcuFailedError, match="has 2 links"):
            take_report(folder / "profile", tmp_path)


def test_a_report_larger_than_ncu_writes_is_refused_unread(tmp_path: Path) -> None:
    with candidate_report_folder() as folder:
        with open(folder / "profile.ncu-rep", "wb") as report:
            report.truncate(ncu.MAX_REPORT_BYTES + 1)  # sparse: no disk used
        with pytest.raises(NcuFailedError, match="more than the 256 MiB"):
            take_report(folder / "profile", tmp_path)
        assert list(tmp_path.iterdir()) == []


def test_a_report_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "profile.ncu-rep").write_bytes(b"x")
    (tmp_path / "linked").symlink_to(real)
    with pytest.raises(NcuFailedError, match="cannot be opened as a folder"):
        take_report(tmp_path / "linked" / "profile", tmp_path)


def test_the_report_folder_is_removed_without_following_links_out_of_it(secret: Path) -> None:
    with candidate_report_folder() as folder:
        (folder / "elsewhere").symlink_to(secret.parent, target_is_directory=True)
    assert not folder.exists()
    assert secret.read_text() == "the trusted process's own file\n"
