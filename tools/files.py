"""Files and folders the user names, and files this tool writes.

`file_problem` / `directory_problem` say in a few words why a path cannot be used, so every command can
refuse it in one line before it writes anything. `write_atomically` replaces a file so that a kill leaves
the old content or the new, never half; it writes through a symbolic link (the link stays a link) and
gives a new file the mode the umask asks for (an existing file keeps its mode). `cached_measurement` keeps
a measurement as JSON beside others that parallel processes may be writing.
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from kernelblaster.tools.errors import UserFacingError

Measured = TypeVar("Measured", bound=BaseModel)

TEMP_SUFFIX = ".partial"
_umask_lock = threading.Lock()


def file_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a file ("does not exist", "is a directory" ...), or None if it can."""
    try:
        status = path.stat()
    except FileNotFoundError:
        return "is a link to a missing file" if path.is_symlink() else "does not exist"
    except NotADirectoryError:
        return "does not exist (a folder on its path is a file)"
    except OSError as error:
        return f"cannot be reached ({error.strerror or error})"
    if stat.S_ISDIR(status.st_mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(status.st_mode):
        return "is not a regular file"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def read_text_file(path: Path, what: str, error: type[UserFacingError] = UserFacingError) -> str:
    """The text of `path`, `what` it is ("the problem file"); unreadable or not UTF-8, a one-line `error`."""
    try:
        return path.read_text()
    except OSError as failure:
        raise error(f"{path}: cannot read {what} ({failure.strerror or failure})") from None
    except UnicodeDecodeError as failure:
        raise error(f"{path}: {what} is not UTF-8 text (byte {failure.start})") from None


def require_file(path: Path, what: str) -> Path:
    """`path`, if it is a readable file; else a one-line error naming `what` it is ("the problem file")."""
    problem = file_problem(path)
    if problem is not None:
        raise UserFacingError(f"{what} {path} {problem}")
    return path


def directory_problem(path: Path) -> str | None:
    """Why a folder cannot be created (or written) at `path`, or None if it can; nothing is created."""
    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    try:
        is_directory = existing.is_dir()
    except OSError as error:
        return f"cannot be reached ({error.strerror or error})"
    if not is_directory:
        return "is a file" if existing == path else f"cannot be created: {existing} is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return "cannot be written (permission denied)" if existing == path else \
            f"cannot be created: {existing} is not writable"
    return None


def write_text_atomically(path: Path, text: str) -> None:
    """Write `text` so that a kill leaves the old file or the new one, never half of one."""
    write_atomically(path, text.encode())


def write_atomically(path: Path, data: bytes) -> None:
    """Replace the file at `path` (or, for a symbolic link, the file it points to) with `data`."""
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=TEMP_SUFFIX)
    try:
        # mkstemp makes the file 0600; the result must look like any file the user's programs write.
        os.fchmod(handle, _mode_for(target))
        with os.fdopen(handle, "wb") as temp_file:
            temp_file.write(data)
            temp_file.flush()
            os.fsync(temp_file.fileno())
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


def read_measurement(path: Path, model: type[Measured]) -> Measured | None:
    """The measurement cached at `path`; None where there is none or it is damaged or stale."""
    try:
        return model.model_validate_json(path.read_bytes())
    except (FileNotFoundError, ValidationError):
        return None


def cached_measurement(path: Path, model: type[Measured], measure: Callable[[], Measured], *,
                       remeasure: bool = False) -> Measured:
    """The measurement cached at `path`, or a new one from `measure`, then cached there. A damaged or stale
    entry is measured again, and so is any with `remeasure`; the write is atomic because a suite's workers share
    the cache."""
    cached = None if remeasure else read_measurement(path, model)
    if cached is not None:
        return cached
    measured = measure()
    write_atomically(path, measured.model_dump_json(indent=2).encode())
    return measured


def abandoned_temporaries(path: Path) -> list[Path]:
    """Temporary files that writers of `path` killed mid-write left behind."""
    target = Path(os.path.realpath(path))
    return list(target.parent.glob(f".{target.name}.*{TEMP_SUFFIX}"))


def _mode_for(target: Path) -> int:
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~current_umask()


def current_umask() -> int:
    """The process's umask, read without changing it where Linux allows (changing it races other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry itself reaches the disk.
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
