"""Where a KB lives: `--kb PATH`, else `$KERNELBLASTER_KB`, else the user data directory; where the seed is.

A KB the user names must exist (a mistyped path must never start a new KB that learns instead of theirs);
only the default location in the user data directory is filled from the seed on first use, and
`kernelblaster kb init PATH` creates one on purpose.
"""

from __future__ import annotations

import itertools
import os
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from kernelblaster.kb.errors import KBFileError
from kernelblaster.tools.files import file_problem

KB_PATH_VARIABLE = "KERNELBLASTER_KB"
KB_FILE_NAME = "kb.json"


def default_kb_path() -> Path:
    """The KB used when no path is given: `$KERNELBLASTER_KB`, else `$XDG_DATA_HOME/kernelblaster/kb.json`."""
    override = os.environ.get(KB_PATH_VARIABLE)
    if override:
        return Path(override).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "kernelblaster" / KB_FILE_NAME


def resolve_kb_path(explicit: str | Path | None) -> Path:
    return Path(explicit).expanduser() if explicit else default_kb_path()


def chosen_kb_path(explicit: str | Path | None) -> Path:
    """The KB file a user chose (`explicit`, else `$KERNELBLASTER_KB`), which must be an existing file; else
    the default location, which may not exist yet. Symbolic links are followed, so writes go through them."""
    if explicit is not None and not str(explicit).strip():
        raise KBFileError(Path(str(explicit)), "an empty path; leave --kb out to use the default KB")
    if not (explicit or os.environ.get(KB_PATH_VARIABLE)):
        return default_kb_path()
    path = resolve_kb_path(explicit)
    problem = file_problem(path)
    if problem == "does not exist":
        raise KBFileError(path, f"does not exist (create a new KB there with `kernelblaster kb init {path}`)")
    if problem is not None:
        raise KBFileError(path, problem)
    return Path(os.path.realpath(path))


def seed_kb_bytes() -> bytes:
    """The seed KB shipped inside the package, copied to a KB path on its first use."""
    return resources.files("kernelblaster.kb").joinpath("seed", "seed_kb.json").read_bytes()


def index_directory_for(kb_path: Path) -> Path:
    """The Chroma index beside a KB file: `kb.json` -> `kb.chroma/`."""
    return kb_path.with_name(kb_path.stem + ".chroma")


def snapshot_folder_for(kb_path: Path) -> Path:
    """Where the KB's snapshots are kept, one folder per run: `kb.json` -> `kb.snapshots/`."""
    return kb_path.with_name(kb_path.stem + ".snapshots")


def backup_path_for(kb_path: Path, label: str) -> Path:
    """Where a replaced KB is kept once per label, e.g. the original of one migrated from v0: `kb.json` ->
    `kb.v0.bak.json`."""
    return kb_path.with_name(f"{kb_path.stem}.{label}.bak{kb_path.suffix}")


def timed_backup_path_for(kb_path: Path, label: str, when: datetime) -> Path:
    """A new file for a copy of the KB taken at `when`, so that no backup ever replaces another: `kb.json` ->
    `kb.pre-import.20261127T140212Z.bak.json` (names sort by time; a second copy within the same second gets
    `-2`, and so on). The caller holds the KB's lock, so no other process picks the same name meanwhile."""
    stamp = when.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    for number in itertools.count(1):
        path = backup_path_for(kb_path, f"{label}.{stamp}" + (f"-{number}" if number > 1 else ""))
        if not path.exists():
            return path
    raise AssertionError("unreachable")
