"""File primitives that make concurrent and interrupted writers safe: an exclusive lock, an atomic replace.

The lock is `fcntl.flock` on a sidecar `<file>.lock`, so it is released by the kernel when its holder dies;
the replace (`replace_as_sole_writer`, over `tools.files.write_atomically`) writes a temporary file in the
same directory, fsyncs it and renames it over the target.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kernelblaster.tools import files


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


def replace_as_sole_writer(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that readers see the old or the new content, never a mix.

    Call it only where no other writer can be mid-write (holding `exclusive_lock(path)`, or as the one process
    that writes the file): it also clears temporary files left by writers that were killed mid-write.
    """
    for leftover in files.abandoned_temporaries(path):
        leftover.unlink(missing_ok=True)
    files.write_atomically(path, data)
