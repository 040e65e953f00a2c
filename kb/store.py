"""`KnowledgeBase`: one KB file as the source of truth, read, queried and changed safely by many processes.

Every change runs under the file's inter-process lock on the latest content from disk and is written by
atomic replace, so concurrent writers lose nothing and a killed writer leaves the previous file whole.
Each learning update (`apply_edits`) is followed, in the same write, by pruning (`kb.pruning`), so the KB
sheds what it no longer uses as it grows. The Chroma index beside the file is synced from the document
whenever it is queried after a change. Snapshots of the KB (one per learning iteration of a run) are kept
compressed and within a bound (`kb.snapshots`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from kernelblaster.kb import snapshots
from kernelblaster.kb.codec import DecodedKB, decode, encode
from kernelblaster.kb.edits import EditResult, KBEdit, apply_edits
from kernelblaster.kb.errors import KBFileError
from kernelblaster.kb.index import IndexUnreadable, SignatureIndex, StateMatch, content_hash, nearest_states
from kernelblaster.kb.operations import OperationKind
from kernelblaster.kb.outcomes import OutcomeEvent, apply_outcome
from kernelblaster.kb.paths import (
    backup_path_for,
    chosen_kb_path,
    index_directory_for,
    resolve_kb_path,
    seed_kb_bytes,
    snapshot_folder_for,
    timed_backup_path_for,
)
from kernelblaster.kb.pruning import DEFAULT_POLICY as DEFAULT_PRUNE_POLICY
from kernelblaster.kb.pruning import prune
from kernelblaster.kb.safe_files import exclusive_lock, replace_as_sole_writer
from kernelblaster.kb.schema import RUN_ID_PATTERN, KBDocument, PerformanceState
from kernelblaster.kb.seed_catalogue import adopt_seed_catalogue
from kernelblaster.kb.selection import DEFAULT_POLICY as DEFAULT_SELECTION_POLICY
from kernelblaster.kb.selection import SelectedOptimization, SelectionPolicy, select_optimizations
from kernelblaster.kb.snapshots import DEFAULT_POLICY as DEFAULT_SNAPSHOT_POLICY
from kernelblaster.kb.snapshots import SnapshotPolicy
from kernelblaster.tools.files import directory_problem

_Result = TypeVar("_Result")

# (inode, size, mtime): a rename-based write always changes the inode, so this tells a file was replaced.
_DiskStamp = tuple[int, int, int]


class KnowledgeBase:
    """A KB file, its validated document in memory, and its signature index."""

    def __init__(self, path: Path, document: KBDocument, stamp: _DiskStamp) -> None:
        self.path = path
        self._document = document
        self._stamp = stamp
        self._revision = 0
        self._index = SignatureIndex(index_directory_for(path))
        self._indexed_revision: int | None = None

    @classmethod
    def load(cls, path: str | Path | None = None, *, create_from_seed: bool = True) -> KnowledgeBase:
        """Open the KB at `path` (default: `default_kb_path()`), first copying the seed KB there if it is
        missing and `create_from_seed`. An older schema is migrated, the original kept beside it."""
        kb_path = resolve_kb_path(path)
        if not kb_path.exists():
            if not create_from_seed:
                raise KBFileError(kb_path, "does not exist")
            _install_seed(kb_path)
        stamp = _disk_stamp(kb_path)
        decoded = decode(kb_path, _read_bytes(kb_path))
        if decoded.migrated_from is not None:
            decoded, stamp = _upgrade_in_place(kb_path)
        return cls(kb_path, decoded.document, stamp)

    @classmethod
    def open(cls, chosen: str | Path | None = None) -> KnowledgeBase:
        """Open the KB a user chose (`--kb`, `$KERNELBLASTER_KB`), which must exist, or the default KB,
        created from the seed on first use (see `kb.paths.chosen_kb_path`)."""
        return cls.load(chosen_kb_path(chosen))

    @classmethod
    def create(cls, path: str | Path | None = None) -> KnowledgeBase:
        """A new KB at `path` (default: `default_kb_path()`), a copy of the seed KB; never over an existing file."""
        kb_path = resolve_kb_path(path)
        if os.path.lexists(kb_path):
            raise KBFileError(kb_path, "already exists; `kernelblaster kb init` never replaces a KB")
        problem = directory_problem(kb_path.parent)
        if problem is not None:
            raise KBFileError(kb_path, f"cannot be created: its folder {problem}")
        _install_seed(kb_path)
        return cls.load(kb_path)

    @property
    def document(self) -> KBDocument:
        return self._document

    def size_bytes(self) -> int:
        return self.path.stat().st_size

    def refresh(self) -> None:
        """Re-read the file if another process replaced it since this one last read or wrote it."""
        stamp = _disk_stamp(self.path)
        if stamp != self._stamp:
            self._set_document(decode(self.path, _read_bytes(self.path)).document, stamp)

    def replace_document(self, document: KBDocument) -> None:
        """Make `document` the KB's content, on disk and in memory."""
        with exclusive_lock(self.path):
            self._install(document)

    def fill_catalogue_from_seed(self, backup_label: str) -> tuple[dict[str, list[str]], Path | None]:
        """Fill the techniques' fields that the seed declares and the KB lacks (`kb.seed_catalogue`) in one
        locked read-modify-write, backing the file up first: the fields filled per technique, and the
        backup (None, and the file untouched, when nothing was missing)."""
        with exclusive_lock(self.path):
            self.refresh()
            document = self._document.model_copy(deep=True)
            filled = adopt_seed_catalogue(document)
            if not filled:
                return filled, None
            backup = self._copy_file(backup_label)
            self._install(document)
        return filled, backup

    def back_up(self, label: str) -> Path:
        """Copy the KB file as it is on disk to a new file named by the label and the time
        (`timed_backup_path_for`), never replacing an earlier backup; the copy's path."""
        with exclusive_lock(self.path):
            return self._copy_file(label)

    def _copy_file(self, label: str) -> Path:
        target = timed_backup_path_for(self.path, label, _now())
        replace_as_sole_writer(target, _read_bytes(self.path))
        return target

    def _install(self, document: KBDocument) -> None:
        self._write(document)
        self._set_document(document, self._stamp)

    def record_outcome(self, event: OutcomeEvent) -> bool:
        """Learn from one step's outcome; False if this event id was already applied (a replay)."""
        return self.record_outcomes([event])[0]

    def record_outcomes(self, events: Sequence[OutcomeEvent]) -> list[bool]:
        """Learn from several outcomes in one write; for each, whether it was new."""
        now = _now()
        return self._change(lambda document: [apply_outcome(document, event, now) for event in events])

    def apply_edits(self, edits: Sequence[KBEdit | Mapping[str, Any]]) -> list[EditResult]:
        """Apply the learning step's edits, then prune; each result says whether it applied or why not."""

        def edit_and_prune(document: KBDocument) -> list[EditResult]:
            results = apply_edits(document, edits)
            prune(document, DEFAULT_PRUNE_POLICY, _now())
            return results

        return self._change(edit_and_prune)

    def nearest_states(self, signature: Sequence[float], arch: str, k: int) -> list[StateMatch]:
        """The k known states nearest to a profiled signature, same-arch states first among equals."""
        self._sync_index()
        try:
            return nearest_states(self._document, self._index, signature, arch, k)
        except IndexUnreadable:
            self.reindex()
            return nearest_states(self._document, self._index, signature, arch, k)

    def select_optimizations(
        self,
        state: PerformanceState,
        k: int,
        *,
        rng_seed: int,
        precision: str,
        previous_technique: str | None = None,
        exclude: Collection[str] = (),
        operations: Collection[OperationKind] | None = None,
        policy: SelectionPolicy = DEFAULT_SELECTION_POLICY,
    ) -> list[SelectedOptimization]:
        """Sample k optimizations of `state` valid under the run's precision policy `precision` and applicable
        to a problem performing `operations` (see `kb.selection.select_optimizations`)."""
        return select_optimizations(
            state,
            k,
            rng_seed=rng_seed,
            techniques=self._document.techniques,
            precision=precision,
            transitions=self._document.transitions,
            previous_technique=previous_technique,
            exclude=exclude,
            operations=operations,
            policy=policy,
        )

    def reindex(self) -> int:
        """Rebuild the signature index from scratch; the number of states indexed."""
        self._index.rebuild(self._document, content_hash(self._document))
        self._indexed_revision = self._revision
        return self._index.count()

    def write_snapshot(self, run_id: str, iteration: int,
                       policy: SnapshotPolicy = DEFAULT_SNAPSHOT_POLICY) -> Path:
        """Save the KB as it is now for iteration `iteration` of run `run_id`, compressed, and drop the
        snapshots `policy` no longer keeps (`kb.snapshots`); the snapshot's path."""
        with exclusive_lock(self.path):
            self.refresh()
            return snapshots.write_snapshot(snapshot_folder_for(self.path), _checked_run_id(run_id), iteration,
                                            encode(self._document), policy)

    def snapshots(self) -> dict[str, list[int]]:
        """The snapshots kept beside the KB: for each run id, the iterations it saved, in order."""
        return snapshots.kept(snapshot_folder_for(self.path))

    def restore_snapshot(self, run_id: str, iteration: int, backup_label: str | None = None) -> Path | None:
        """Make the KB what it was when `write_snapshot(run_id, iteration)` was called, first copying the file
        to a new backup file (`timed_backup_path_for`) if a label is given: the copy's path (None without a label).
        The snapshot is read and validated whole first, so a damaged one is refused with nothing written."""
        # One lock throughout: no writer trims the snapshot away while it is read, or changes the KB between
        # its backup and its restore. The helpers below take no lock: a second one from this process would wait
        # on this one for ever.
        with exclusive_lock(self.path):
            document = self._snapshot_document(run_id, iteration)
            backup = self._copy_file(backup_label) if backup_label is not None else None
            self._install(document)
        return backup

    def _snapshot_document(self, run_id: str, iteration: int) -> KBDocument:
        """The validated document of a kept snapshot; a one-line `KBFileError` if it is missing or damaged."""
        folder = snapshot_folder_for(self.path)
        try:
            source, content = snapshots.read_snapshot(folder, run_id, iteration)
        except KeyError:
            raise KBFileError(folder, f"no snapshot of run {run_id} iteration {iteration}") from None
        return decode(source, content).document

    def _change(self, change: Callable[[KBDocument], _Result]) -> _Result:
        with exclusive_lock(self.path):
            self.refresh()
            try:
                result = change(self._document)
            except BaseException:
                # The change may have stopped half-way; drop it by reading back what is on disk.
                self._set_document(decode(self.path, _read_bytes(self.path)).document, _disk_stamp(self.path))
                raise
            self._write(self._document)
            self._revision += 1
        return result

    def _write(self, document: KBDocument) -> None:
        replace_as_sole_writer(self.path, encode(document))
        self._stamp = _disk_stamp(self.path)

    def _set_document(self, document: KBDocument, stamp: _DiskStamp) -> None:
        self._document = document
        self._stamp = stamp
        self._revision += 1

    def _sync_index(self) -> None:
        if self._indexed_revision != self._revision:
            self._index.sync(self._document, content_hash(self._document))
            self._indexed_revision = self._revision


def _install_seed(path: Path) -> None:
    try:
        with exclusive_lock(path):
            if not path.exists():
                # Installed in the current schema, which the shipped seed need not be written in.
                replace_as_sole_writer(path, encode(decode(path, seed_kb_bytes()).document))
    except OSError as error:
        raise KBFileError(path, f"cannot be created ({error.strerror or error})") from None


def _now() -> datetime:
    # Whole seconds: finer times only lengthen the file.
    return datetime.now(UTC).replace(microsecond=0)


def _upgrade_in_place(path: Path) -> tuple[DecodedKB, _DiskStamp]:
    with exclusive_lock(path):
        raw = _read_bytes(path)
        decoded = decode(path, raw)
        if decoded.migrated_from is not None:
            backup = backup_path_for(path, f"v{decoded.migrated_from}")
            if not backup.exists():
                replace_as_sole_writer(backup, raw)
            replace_as_sole_writer(path, encode(decoded.document))
        return decoded, _disk_stamp(path)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise KBFileError(path, f"cannot be read: {error.strerror or error}") from None


def _disk_stamp(path: Path) -> _DiskStamp:
    try:
        status = os.stat(path)
    except OSError as error:
        raise KBFileError(path, f"cannot be read: {error.strerror or error}") from None
    return (status.st_ino, status.st_size, status.st_mtime_ns)


def _checked_run_id(run_id: str) -> str:
    if not re.fullmatch(RUN_ID_PATTERN, run_id):
        raise ValueError(f"run id {run_id!r} must be letters, digits, '_', '-' or '.' (it names a folder)")
    return run_id


def trim_snapshots(kb_path: Path, policy: SnapshotPolicy) -> None:
    """Drop the snapshots of the KB file `kb_path` that `policy` does not keep (none if it has none)."""
    folder = snapshot_folder_for(kb_path)
    if folder.is_dir():
        with exclusive_lock(kb_path):
            snapshots.trim(folder, policy)


def read_document(path: Path) -> KBDocument:
    """The validated document of a KB file or a snapshot (compressed or not; an older version migrated in
    memory only); nothing is written."""
    return decode(path, snapshots.decompressed(_read_bytes(path), path)).document
