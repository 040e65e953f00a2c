"""On a GPU: a run's reference outputs leave GPU memory when the run is over, though the process (a
`langgraph dev` server, a suite) and its `Services` live on.

The agents are scripted (tests/fixtures/graph/e2e_driver.py); the harness, nvcc, the driver, the graph and
the KB are real. Profiling is off: it is not what holds memory, and it is slow.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch
from fixtures.graph.e2e_driver import PROBLEM, scripted_services

from kernelblaster.graph.app.api import Run
from kernelblaster.graph.core.context import RunContext
from kernelblaster.harness.evaluate import CandidateEvaluator, EvalOptions
from kernelblaster.harness.problem import load_problem
from kernelblaster.kb.store import KnowledgeBase

pytestmark = pytest.mark.gpu
# What PyTorch may keep for itself between runs (its own workspaces); the references are over 1 GiB.
SLACK_BYTES = 64 << 20


def _allocated() -> int:
    gc.collect()
    torch.cuda.synchronize(0)
    return torch.cuda.memory_allocated(0)


def _holders() -> str:
    """The CUDA tensors Python still reaches, with what holds each (two steps up), for a failure's message."""
    found = []
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.is_cuda and obj.untyped_storage().nbytes() >= 1 << 20:
            chain = [type(r).__qualname__ + (f"({r.__qualname__})" if hasattr(r, "__qualname__") else "")
                     for r in gc.get_referrers(obj) if r is not found][:4]
            found.append(f"{tuple(obj.shape)} {obj.dtype} held by {chain}")
    return "; ".join(found) or "no Python-reachable CUDA tensor of 1 MiB or more"


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELBLASTER_CACHE", str(tmp_path / "cache"))


def test_closing_an_evaluator_gives_its_reference_outputs_back(tmp_path: Path) -> None:
    evaluator = CandidateEvaluator(load_problem(PROBLEM), EvalOptions(seeds=2, gpu=0, cache_dir=tmp_path / "cache"))
    before = _allocated()
    evaluator.references.warm()
    held = _allocated()
    reserved = torch.cuda.memory_reserved(0)
    assert held - before > SLACK_BYTES
    evaluator.close()
    assert _allocated() - before < SLACK_BYTES
    assert torch.cuda.memory_reserved(0) < reserved


def test_a_finished_run_leaves_nothing_allocated_while_its_services_live_on(tmp_path: Path) -> None:
    services = scripted_services()
    KnowledgeBase.create(tmp_path / "kb.json")
    before = _allocated()
    context = RunContext(iterations=1, trajectories=1, depth=1, profile=False, kb_path=str(tmp_path / "kb.json"),
                         run_dir=str(tmp_path / "run"))
    outcome = Run.create(PROBLEM, context, services=services).advance()
    assert outcome.best_source is not None
    assert _allocated() - before < SLACK_BYTES, _holders()
