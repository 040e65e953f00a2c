"""A `kernelblaster optimize --llm human` run on a real GPU, started from the command line as a person would,
for the GPU tests that drive it: a problem (the example one unless told) from an initial kernel, one step, and
the JSON answers a person would give the analytic roles."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "examples" / "problems" / "elementwise_swish_scale.py"
CANDIDATES = REPO / "examples" / "candidates" / "elementwise_swish_scale"
ANSWERS_BY_ROLE = {
    "soft_verifier": {"faithful": True},
    "state_extractor": {"name": "memory-bound streaming", "primary_bottleneck": "DRAM bandwidth",
                        "description": "one pass over x with scalar loads, limited by DRAM"},
    "state_matcher": {"state_id": "memory_bandwidth_bound", "reason": "a streaming pass limited by DRAM, as read"},
    "policy_evaluation": {"summary": "vectorised loads helped as predicted"},
    "perf_gap_analysis": {"analysis": "the kernel is close to the DRAM roofline; little is left to gain"},
    "parameter_update": {"edits": [], "rationale": "one measurement is not enough to change the KB"},
}


def kernelblaster(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelblaster.graph", *args], capture_output=True, text=True, env=env,
                          timeout=600, check=False)


def start_human_run(tmp_path: Path, problem: Path = PROBLEM,
                    initial: Path = CANDIDATES / "naive.cu") -> tuple[Path, dict[str, str]]:
    """A one-step `--llm human` run of `problem` (the example problem) from `initial` (its naive kernel),
    waiting for its first answer; its run directory and the environment to drive it with."""
    env = os.environ | {"KERNELBLASTER_CACHE": str(tmp_path / "cache")}
    run_dir = tmp_path / "run"
    assert kernelblaster("kb", "init", str(tmp_path / "kb.json"), env=env).returncode == 0
    started = kernelblaster("optimize", str(problem), "--llm", "human", "--init", str(initial),
                            "--run-dir", str(run_dir), "--kb", str(tmp_path / "kb.json"), "--iterations", "1",
                            "--trajectories", "1", "--depth", "1", env=env)
    assert started.returncode == 0, started.stderr
    return run_dir, env
