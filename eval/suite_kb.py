"""The suite's knowledge base and its one writer: version n is the start KB plus the learning of the suite's
first n problems, each problem's journal replayed in suite order, whatever order the problems finish in.

Versions are immutable files named by content and gzip-compressed (`SUITE/kb/<sha>.json.gz`; a suite made
before compression has `<sha>.json`, read as well); `kb.json` beside them is always the newest, uncompressed.
A problem starts from a version fixed by its position (`start_version`), so the KB a problem sees, and the
suite's final KB, follow from the LLM answers alone, not from timing. On a Ray cluster this class runs as
the one actor holding the KB (`eval.ray_cluster`).
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Sequence
from pathlib import Path

from kernelblaster.eval.results import KBVersionRow
from kernelblaster.kb.codec import decode, encode
from kernelblaster.kb.journal import KBChange, ReplayReport, replay
from kernelblaster.kb.safe_files import replace_as_sole_writer
from kernelblaster.kb.snapshots import COMPRESSED_SUFFIX, decompressed
from kernelblaster.kb.summary import kb_stats

LATEST_NAME = "kb.json"


def start_version(position: int, window: int, learns: bool) -> int:
    """The KB version problem `position` starts from: the one holding every problem at least `window`
    places before it. With `window` problems in flight at once, that version always exists in time."""
    return max(0, position - window + 1) if learns else 0


class SuiteKB:
    """The suite's KB versions, and the one place new versions are made."""

    def __init__(self, directory: Path, versions: Sequence[KBVersionRow]) -> None:
        self.directory = directory
        self._versions = list(versions)
        self._waiting: dict[int, list[KBChange]] = {}

    @classmethod
    def start(cls, directory: Path, start: bytes) -> tuple[SuiteKB, KBVersionRow]:
        """A suite KB whose version 0 is the KB file content `start`."""
        suite_kb = cls(directory, [])
        document = decode(directory / "start.json", start).document
        version = suite_kb._write(encode(document), None, ReplayReport())
        return suite_kb, version

    @property
    def latest(self) -> int:
        return len(self._versions) - 1

    def versions(self) -> list[KBVersionRow]:
        return list(self._versions)

    def document_bytes(self, version: int) -> bytes:
        """The KB file content of `version`."""
        path = self.directory / self._versions[version].file
        return decompressed(path.read_bytes(), path)

    def submit(self, position: int, changes: Sequence[KBChange]) -> list[KBVersionRow]:
        """Take problem `position`'s journal; apply it, and any waiting for it, once every problem before it is
        applied. The versions made now, in order (none while an earlier problem is still out)."""
        if position < self.latest:
            return []  # already in the KB: a resumed suite submitting again changes nothing
        self._waiting[position] = list(changes)
        made = []
        while self.latest in self._waiting:
            made.append(self._apply(self.latest, self._waiting.pop(self.latest)))
        return made

    def _apply(self, position: int, changes: list[KBChange]) -> KBVersionRow:
        document = decode(self.directory / self._versions[-1].file, self.document_bytes(self.latest)).document
        report = replay(document, changes)
        return self._write(encode(document), position, report)

    def _write(self, content: bytes, position: int | None, report: ReplayReport) -> KBVersionRow:
        sha256 = hashlib.sha256(content).hexdigest()
        name = f"{sha256[:16]}{COMPRESSED_SUFFIX}"
        replace_as_sole_writer(self.directory / name, gzip.compress(content, mtime=0))
        replace_as_sole_writer(self.directory / LATEST_NAME, content)
        stats = kb_stats(decode(self.directory / LATEST_NAME, content).document, name, len(content))
        version = KBVersionRow(version=len(self._versions), position=position, file=name, sha256=sha256,
                               bytes=len(content), states=stats.states, optimizations=stats.optimizations,
                               techniques=stats.techniques, measured=stats.measured, applied=report.applied,
                               rejected=len(report.rejected))
        self._versions.append(version)
        return version
