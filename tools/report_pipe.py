"""A pipe that a checker running in the candidate's sandbox (compute-sanitizer) writes its report into,
drained by the trusted process within a bound.

A report file in a folder the sandbox can write, read back by path, is the candidate's to replace: with a
symbolic link to one of the trusted process's own files (/proc/self/environ), a FIFO that blocks the
reader, or gigabytes. Here no path is ever resolved: the trusted process makes the pipe, the checker gets
its write end as an inherited descriptor (`child_path`, /proc/self/fd/N in the checker's own /proc), and
a thread keeps the first `head_bytes`, the last `tail_bytes` and the count of all bytes; nothing touches
the disk. A pipe has no file offset, so its bytes arrive in the order they were written: what the
checker writes after the candidate's process has ended (its summary) comes after anything the candidate
wrote into it.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading

READ_CHUNK = 65536
POLL_MS = 100


class ReportPipe:
    """The pipe and its reader thread; `finish` ends both."""

    def __init__(self, head_bytes: int, tail_bytes: int) -> None:
        # Both ends are close-on-exec: the write end reaches a child only through Popen's pass_fds.
        self._read_fd, self._write_fd = os.pipe()
        self._head_bytes, self._tail_bytes = head_bytes, tail_bytes
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._drain, name="checker-report", daemon=True)
        self._reader.start()

    @property
    def write_fd(self) -> int:
        """The descriptor to pass to the child (Popen's pass_fds)."""
        return self._write_fd

    @property
    def child_path(self) -> str:
        """The name under which the child (and what it runs before exec) opens the write end."""
        return f"/proc/self/fd/{self._write_fd}"

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return self._total

    def head(self) -> str:
        """The first bytes received (at most `head_bytes`)."""
        with self._lock:
            return self._head.decode(errors="replace")

    def text(self) -> str:
        """The head, then the tail; where bytes between them were dropped, a line says how many."""
        with self._lock:
            left_out = self._total - len(self._head) - len(self._tail)
            gap = f"\n[... {left_out} bytes of the report left out ...]\n".encode() if left_out else b""
            return (bytes(self._head) + gap + bytes(self._tail)).decode(errors="replace")

    def finish(self, drain_s: float) -> None:
        """Close this process's write end, wait up to `drain_s` for the writers' last bytes (the end of the
        pipe comes when every process holding it has ended), then stop reading and close the pipe."""
        self._close_write_end()
        self._reader.join(timeout=drain_s)
        self._stop.set()
        self._reader.join()
        with contextlib.suppress(OSError):
            os.close(self._read_fd)

    def _close_write_end(self) -> None:
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1

    def _drain(self) -> None:
        poller = select.poll()
        poller.register(self._read_fd, select.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(POLL_MS):
                continue
            chunk = os.read(self._read_fd, READ_CHUNK)
            if not chunk:
                return
            self._keep(chunk)

    def _keep(self, chunk: bytes) -> None:
        with self._lock:
            self._total += len(chunk)
            room = self._head_bytes - len(self._head)
            self._head += chunk[:room]
            self._tail += chunk[room:]
            del self._tail[: max(0, len(self._tail) - self._tail_bytes)]
