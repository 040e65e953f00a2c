"""The command line on a GPU machine (issue 9): a GPU index the machine does not have is one line before
anything is written, and a data-dependent problem too big for a CPU run gets its header from the GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "examples" / "problems" / "elementwise_swish_scale.py"
NAIVE = ROOT / "examples" / "candidates" / "elementwise_swish_scale" / "naive.cu"


def kernelblaster(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelblaster.graph", *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600, check=False)


def test_optimize_on_a_gpu_the_machine_lacks_is_one_line_and_makes_no_run(tmp_path: Path) -> None:
    absent = str(torch.cuda.device_count())
    assert kernelblaster(tmp_path, "kb", "init", "kb.json").returncode == 0
    finished = kernelblaster(tmp_path, "optimize", str(PROBLEM), "--llm", "human", "--kb", "kb.json", "--gpus", absent)
    assert finished.returncode == 2
    assert finished.stderr.startswith(f"kernelblaster: cannot run here: the run needs GPU {absent} (only ")
    assert finished.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_eval_on_a_gpu_the_machine_lacks_is_one_line(tmp_path: Path) -> None:
    absent = str(torch.cuda.device_count())
    finished = kernelblaster(tmp_path, "eval", str(PROBLEM), str(NAIVE), "--gpu", absent)
    assert finished.returncode == 2
    assert finished.stderr == f"kernelblaster: --gpu {absent}: no such GPU (only {_visible()} visible)\n"


def test_a_data_dependent_problem_too_big_for_the_cpu_gets_its_header_from_the_gpu(tmp_path: Path) -> None:
    huge = ROOT / "tests" / "fixtures" / "problems" / "data_dependent_huge.py"
    finished = kernelblaster(tmp_path, "header", str(huge))
    assert finished.returncode == 0, finished.stderr
    assert "static constexpr int64_t KB_IN_X_DIM0 = 1073741824;" in finished.stdout


def _visible() -> str:
    count = torch.cuda.device_count()
    return "GPU 0 is" if count == 1 else f"GPUs 0..{count - 1} are"
