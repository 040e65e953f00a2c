"""File primitives that make concurrent and interrupted writers safe: an exclusive lock, an atomic replace.

The lock is `fcntl.flock` on a sidecar `<file>.lock`, so it is released by the kernel when its holder dies;
the replace writes a temporary file in the same directory, fsyncs it and renames it over the target.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_TEMP_SUFFIX = ".partial"


def lock_path_for(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold the inter-process lock of `path` (not the file itself, which renames replace) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path_for(path), "a") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that readers see the old or the new content, never a mix.

    Call it while holding `exclusive_lock(path)`: it also clears temporary files left by writers that
    were killed mid-write, which is safe only when no other writer can be mid-write.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_temporaries(path)
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TEMP_SUFFIX)
    try:
        with os.fdopen(handle, "wb") as temp_file:
            temp_file.write(data)
            temp_file.flush()
            os.fsync(temp_file.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _remove_abandoned_temporaries(path: Path) -> None:
    for leftover in path.parent.glob(f".{path.name}.*{_TEMP_SUFFIX}"):
        leftover.unlink(missing_ok=True)


def _fsync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry itself reaches the disk.
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
