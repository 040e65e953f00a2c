"""`kernelblaster optimize --llm human` on a real GPU: a person answers every prompt with `kernelblaster
answer` (here, what a person would type: real CUDA for the lowering agent, JSON for the other roles), and
the run ends with the measured faster kernel as best.cu and a report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpu.human_run import ANSWERS_BY_ROLE, CANDIDATES, kernelblaster, start_human_run

from kernelblaster.graph.app import api

pytestmark = pytest.mark.gpu

MAX_PROMPTS = 20


def expert_answer(role: str) -> str:
    if role == "lowering":
        return (CANDIDATES / "fast.cu").read_text()
    return json.dumps(ANSWERS_BY_ROLE[role])


def test_a_human_driven_run_on_the_gpu_finishes_with_the_faster_kernel(tmp_path: Path) -> None:
    run_dir, env = start_human_run(tmp_path)
    answered: list[str] = []
    while (outcome := api.Run.open(run_dir).outcome()).status == "waiting_for_answer":
        assert len(answered) < MAX_PROMPTS, f"still asking after {answered}"
        role = outcome.questions[0].question.role
        answer_file = tmp_path / f"answer-{len(answered)}.txt"
        answer_file.write_text(expert_answer(role))
        replied = kernelblaster("answer", str(run_dir), "--file", str(answer_file), env=env)
        assert replied.returncode == 0, replied.stderr
        answered.append(role)
    assert outcome.status == "finished", outcome
    assert "lowering" in answered
    assert (run_dir / "best.cu").read_text().strip() == (CANDIDATES / "fast.cu").read_text().strip()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "optimized"
    assert report["speedups"]["vs_initial"] > 1 and report["speedups"]["vs_best_baseline"] > 0
    print("prompts answered:", answered, "\nreport:", json.dumps(report, indent=1)[:3000])
