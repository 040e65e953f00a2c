"""On a GPU: a run's reference outputs leave GPU memory when the run is over, though the process (a
`langgraph dev` server, a suite) and its `Services` live on; PyTorch's own cuBLAS workspaces stay, as PyTorch
keeps them (one per handle and stream it used, bounded by its handle pool).

The agents are scripted (tests/fixtures/graph/e2e_driver.py); the harness, nvcc, the driver, the graph and
the KB are real. Profiling is off: it is not what holds memory, and it is slow.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

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


def _live_blocks() -> list[dict[str, Any]]:
    return [block for segment in torch.cuda.memory._snapshot()["segments"] for block in segment["blocks"]
            if block["state"] == "active_allocated"]


def _is_cublas_workspace(block: dict[str, Any]) -> bool:
    """PyTorch's own cuBLAS/cuBLASLt workspace (32 MiB on Hopper), which it keeps for each handle and stream it
    has used for the life of the process: a thread of this run that ran a matrix product leaves one. At c81cb09
    an H100 run left two 32 MiB blocks that PyTorch's C++ allocated (the message then showed only C++ frames),
    taken to be these; a leak of the run's own shows its Python frames below."""
    return any("Workspace" in frame["name"] for frame in block.get("frames", [])
               if not frame["filename"].endswith(".py"))


def _pytorch_workspace_bytes() -> int:
    return sum(block["size"] for block in _live_blocks() if _is_cublas_workspace(block))


def _holders() -> str:
    """Where each live block of 1 MiB or more was allocated (its innermost Python frames, from PyTorch's
    allocation history, which the test turns on), for a failure's message."""
    lines = []
    for block in _live_blocks():
        if block["size"] < 1 << 20 or _is_cublas_workspace(block):
            continue
        frames = [f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in block.get("frames", [])
                  if f["filename"].endswith(".py") and "/torch/" not in f["filename"]][:8]
        lines.append(f"{block['size'] >> 20} MiB from {' < '.join(frames) or 'no recorded Python frame'}")
    return "\n".join(lines) or "no live block of 1 MiB or more"


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
    torch.cuda.memory._record_memory_history(max_entries=200_000)  # where a leaked block came from
    before = _allocated() - _pytorch_workspace_bytes()
    context = RunContext(iterations=1, trajectories=1, depth=1, profile=False, kb_path=str(tmp_path / "kb.json"),
                         run_dir=str(tmp_path / "run"))
    outcome = Run.create(PROBLEM, context, services=services).advance()
    assert outcome.best_source is not None
    leaked = _allocated() - _pytorch_workspace_bytes() - before
    where = _holders() if leaked >= SLACK_BYTES else ""
    torch.cuda.memory._record_memory_history(enabled=None)
    assert leaked < SLACK_BYTES, where
