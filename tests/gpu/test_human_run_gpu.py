"""`kernelblaster optimize --llm human` on a real GPU: a person answers every prompt with `kernelblaster
answer` (here, what a person would type: real CUDA for the lowering agent, JSON for the other roles), and
the run ends with the measured faster kernel as best.cu and a report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelblaster.graph import api

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "examples" / "problems" / "elementwise_swish_scale.py"
CANDIDATES = REPO / "examples" / "candidates" / "elementwise_swish_scale"
MAX_PROMPTS = 20
ANSWERS_BY_ROLE = {
    "soft_verifier": {"faithful": True},
    "state_extractor": {"name": "memory-bound streaming", "primary_bottleneck": "DRAM bandwidth",
                        "description": "one pass over x with scalar loads, limited by DRAM"},
    "state_matcher": {"state_id": "memory_bandwidth_bound"},
    "policy_evaluation": {"summary": "vectorised loads helped as predicted"},
    "perf_gap_analysis": {"analysis": "the kernel is close to the DRAM roofline; little is left to gain"},
    "parameter_update": {"edits": [], "rationale": "one measurement is not enough to change the KB"},
}


def kernelblaster(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelblaster.graph", *args], capture_output=True, text=True, env=env,
                          timeout=600, check=False)


def expert_answer(role: str) -> str:
    if role == "lowering":
        return (CANDIDATES / "fast.cu").read_text()
    return json.dumps(ANSWERS_BY_ROLE[role])


def start_human_run(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A one-step `--llm human` run of the example problem from its naive kernel, waiting for its first answer;
    its run directory and the environment to drive it with."""
    env = os.environ | {"KERNELBLASTER_CACHE": str(tmp_path / "cache")}
    run_dir = tmp_path / "run"
    assert kernelblaster("kb", "init", str(tmp_path / "kb.json"), env=env).returncode == 0
    started = kernelblaster("optimize", str(PROBLEM), "--llm", "human", "--init", str(CANDIDATES / "naive.cu"),
                            "--run-dir", str(run_dir), "--kb", str(tmp_path / "kb.json"), "--iterations", "1",
                            "--trajectories", "1", "--depth", "1", env=env)
    assert started.returncode == 0, started.stderr
    return run_dir, env


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
