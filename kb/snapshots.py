"""The KB's snapshots beside it (`kb.snapshots/RUN_ID/iteration-NNNN.json.gz`): gzip-compressed, and kept
within a bound as runs accumulate.

After every snapshot written, the folder is trimmed (`SnapshotPolicy`): the runs that wrote most recently
keep every iteration; each older run keeps only its last snapshot, the KB as that run left it. So the
folder grows by one compressed KB per run rather than one full KB per iteration of every run (a KB
after 250 simulated problems is about 540 kB as JSON and 70 kB compressed). Snapshots written before
compression (`iteration-NNNN.json`) are still read, and compressed when the folder is trimmed.

The caller holds the KB file's lock while writing or trimming (`KnowledgeBase.write_snapshot`).
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kernelblaster.kb.errors import KBFileError
from kernelblaster.kb.safe_files import replace_as_sole_writer

COMPRESSED_SUFFIX = ".json.gz"
_NAME = re.compile(r"^iteration-(\d{4,})\.json(\.gz)?$")
_GZIP_MAGIC = b"\x1f\x8b"
# Whole-KB JSON compresses about eightfold at level 6; higher levels save little and cost more time.
_LEVEL = 6


@dataclass(frozen=True)
class SnapshotPolicy:
    """Which snapshots stay: every iteration of the `keep_runs` runs that wrote most recently, and the last
    snapshot of every other run."""

    keep_runs: int = 5

    def __post_init__(self) -> None:
        if self.keep_runs < 0:
            raise ValueError(f"keep_runs is 0 or more, not {self.keep_runs}")


DEFAULT_POLICY = SnapshotPolicy()


def snapshot_file(folder: Path, run_id: str, iteration: int) -> Path:
    """Where `write_snapshot` puts iteration `iteration` of run `run_id` in the snapshot folder `folder`."""
    return folder / run_id / f"iteration-{iteration:04d}{COMPRESSED_SUFFIX}"


def write_snapshot(folder: Path, run_id: str, iteration: int, content: bytes,
                   policy: SnapshotPolicy = DEFAULT_POLICY) -> Path:
    """Save the KB file content `content` as iteration `iteration` of run `run_id`, then trim the folder."""
    target = snapshot_file(folder, run_id, iteration)
    replace_as_sole_writer(target, gzip.compress(content, _LEVEL, mtime=0))
    (folder / run_id / f"iteration-{iteration:04d}.json").unlink(missing_ok=True)
    trim(folder, policy, writing=run_id)
    return target


def kept(folder: Path) -> dict[str, list[int]]:
    """The snapshots in `folder`: for each run id, its iterations in order."""
    return {run: sorted(files) for run, files in _files(folder).items()}


def read_snapshot(folder: Path, run_id: str, iteration: int) -> tuple[Path, bytes]:
    """The file of a kept snapshot and its KB content (decompressed); `KeyError` if it is not kept, a one-line
    `KBFileError` if it cannot be read or decompressed."""
    path = _files(folder).get(run_id, {})[iteration]
    try:
        data = path.read_bytes()
    except OSError as error:
        raise KBFileError(path, f"cannot be read: {error.strerror or error}") from None
    return path, decompressed(data, path)


def decompressed(data: bytes, source: Path) -> bytes:
    """KB file content from the bytes of `source` (a snapshot, an export), compressed or not; compressed bytes
    that are damaged (cut short, corrupted) are a one-line error naming `source`."""
    if not data.startswith(_GZIP_MAGIC):
        return data
    try:
        return gzip.decompress(data)
    except (EOFError, OSError, zlib.error) as error:  # gzip.BadGzipFile is an OSError
        raise KBFileError(source, f"not a valid gzip file: damaged or cut short ({error})") from None


def trim(folder: Path, policy: SnapshotPolicy = DEFAULT_POLICY, writing: str | None = None) -> None:
    """Delete what `policy` does not keep, and compress snapshots kept uncompressed. The run `writing` counts
    as the most recent (file times are coarse: another run may have written within the same tick)."""
    runs = _files(folder)
    by_recency = sorted(runs, key=lambda run: (run == writing, _newest(runs[run].values()), run), reverse=True)
    recent = by_recency[:policy.keep_runs]
    for run, files in runs.items():
        last = max(files)
        for iteration, path in files.items():
            if run not in recent and iteration != last:
                path.unlink(missing_ok=True)
            elif not path.name.endswith(COMPRESSED_SUFFIX):
                _compress(path, snapshot_file(folder, run, iteration))


def _files(folder: Path) -> dict[str, dict[int, Path]]:
    """Every snapshot file by run and iteration; of two files of one iteration, the compressed one."""
    runs: dict[str, dict[int, Path]] = {}
    for path in sorted(folder.glob("*/iteration-*")):
        found = _NAME.match(path.name)
        if found and path.is_file():
            iterations = runs.setdefault(path.parent.name, {})
            if found.group(2) or int(found.group(1)) not in iterations:
                iterations[int(found.group(1))] = path
    return runs


def _newest(paths: Iterable[Path]) -> int:
    return max(path.stat().st_mtime_ns for path in paths)


def _compress(source: Path, target: Path) -> None:
    """Replace an uncompressed snapshot by its compressed copy, keeping its time (which orders the runs)."""
    stat = source.stat()
    replace_as_sole_writer(target, gzip.compress(source.read_bytes(), _LEVEL, mtime=0))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    source.unlink()
