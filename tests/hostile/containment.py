"""Tripwires for the hostile suite: what a contained candidate must not reach, and the check that it did not.

Before a hostile candidate runs, `planted` puts a secret file in the host's /tmp, puts a fake API key
in the environment, listens on the TCP port and abstract Unix socket the candidates try, and counts the
SIGWINCH signals this process receives; afterwards it checks that no secret appears in anything the
harness returned or collected, no host file was written, nothing connected and no signal arrived.
"""

from __future__ import annotations

import shutil
import signal
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import pytest

CANARY_DIR = Path("/tmp/kernelblaster-hostile-canary")
PLANTED_ELSEWHERE = (
    Path("/tmp/kernelblaster-hostile-written"),
    Path("/var/tmp/kernelblaster-hostile-written"),
    Path("/tmp/kernelblaster-hostile-exec"),
    Path("/tmp/kernelblaster-hostile-memfd"),
    CANARY_DIR / "owned",
)
TCP_PORT = 47831
ABSTRACT_SOCKET = b"\0kernelblaster-hostile"
HOST_PASSWD_LINE = "root:x:0:0"

@dataclass
class Tripwires:
    """Secrets planted and listeners opened for one hostile candidate."""

    file_secret: str
    env_secret: str
    listeners: list[socket.socket]
    signals: list[int] = field(default_factory=list)

    def assert_untouched(self, collected: list[str], build_dirs: list[Path]) -> None:
        """Nothing leaked into `collected` (what the harness returned or read from the driver), nothing
        was written on the host (also next to the builds in `build_dirs`), nothing connected, no signal."""
        text = "\n".join(collected)
        for secret in (self.file_secret, self.env_secret, HOST_PASSWD_LINE):
            assert secret not in text, f"{secret!r} leaked into what the harness collected"
        written = [path for path in PLANTED_ELSEWHERE if path.exists()]
        written += [path / "pwned" for path in build_dirs if (path / "pwned").exists()]
        assert not written, f"host files written: {written}"
        for listener in self.listeners:
            with pytest.raises(BlockingIOError):
                listener.accept()
        assert self.signals == [], f"this process received SIGWINCH {len(self.signals)} times"


def _listen_tcp() -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", TCP_PORT))
    return listener


def _listen_abstract() -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(ABSTRACT_SOCKET)
    return listener




@contextmanager
def planted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tripwires]:
    """Plant the secrets, open the listeners and count SIGWINCH for the block."""
    for path in PLANTED_ELSEWHERE:
        path.unlink(missing_ok=True)
    shutil.rmtree(CANARY_DIR, ignore_errors=True)
    CANARY_DIR.mkdir()
    wires = Tripwires(file_secret=f"CANARY-FILE-{uuid.uuid4().hex}", env_secret=f"sk-canary-{uuid.uuid4().hex}",
                      listeners=[_listen_tcp(), _listen_abstract()])
    (CANARY_DIR / "secret.txt").write_text(wires.file_secret)
    monkeypatch.setenv("OPENAI_API_KEY", wires.env_secret)
    for listener in wires.listeners:
        listener.listen(8)
        listener.setblocking(False)

    def count(signum: int, frame: FrameType | None) -> None:
        wires.signals.append(signum)

    previous = signal.signal(signal.SIGWINCH, count)
    try:
        yield wires
    finally:
        signal.signal(signal.SIGWINCH, previous)
        for listener in wires.listeners:
            listener.close()
        shutil.rmtree(CANARY_DIR, ignore_errors=True)
