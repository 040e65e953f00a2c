"""Fixtures shared by the CPU tests: the shipped seed KB, the recorded stand-in for the GPU harness, a fresh
working directory for the command line, and benchmarks/prompt_sizes.py as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from fixtures.graph.recorded_evaluator import EvaluationLog, recorded_evaluators

from kernelblaster.graph.core import services
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


@pytest.fixture
def fresh_cli_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The command line run from an empty `tmp_path`, with no KB, endpoint or data folder of the machine's."""
    monkeypatch.delenv("KERNELBLASTER_KB", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def prompt_sizes() -> ModuleType:
    """benchmarks/prompt_sizes.py (the prompts of any problem, rendered on CPU), imported as a module."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "prompt_sizes.py"
    spec = importlib.util.spec_from_file_location("prompt_sizes", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["prompt_sizes"] = module
    spec.loader.exec_module(module)
    return module
