"""The hostile suite's fixture: tripwires planted around each hostile candidate (tests/hostile/containment.py).
The suite's raw system calls are x86-64 instructions, so it is collected on x86-64 only."""

from __future__ import annotations

import platform
from collections.abc import Iterator

import pytest
from hostile.containment import Tripwires, planted

collect_ignore_glob = [] if platform.machine() == "x86_64" else ["test_hostile_*.py"]


@pytest.fixture
def tripwires(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tripwires]:
    with planted(monkeypatch) as wires:
        yield wires
