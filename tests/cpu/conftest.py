"""Fixtures shared by the CPU tests: the shipped seed KB, and the recorded stand-in for the GPU harness."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.graph.recorded_evaluator import EvaluationLog, recorded_evaluators

from kernelblaster.graph import services
from kernelblaster.kb.codec import decode
from kernelblaster.kb.paths import seed_kb_bytes
from kernelblaster.kb.schema import KBDocument


@pytest.fixture(scope="module")
def seed() -> KBDocument:
    """The seed KB that ships with the package, as a document."""
    return decode(Path("seed_kb.json"), seed_kb_bytes()).document


@pytest.fixture
def recorded_harness(monkeypatch: pytest.MonkeyPatch) -> EvaluationLog:
    """Runs started through the CLI or the API evaluate on the recorded stand-in (no GPU); the log says what
    they asked of it."""
    log = EvaluationLog()
    monkeypatch.setattr(services, "harness_evaluator", recorded_evaluators(log))
    return log
