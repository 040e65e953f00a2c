"""The hand-written kernels for KernelBench problems (tests/gpu/kernelbench_cases.py) pass the source rules and
compile against their problem's generated header; whether each is accepted or rejected is a GPU test."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest
from gpu.kernelbench_cases import ALL, KERNELS_DIR, KernelCase

from kernelblaster.harness.analysis import analyse_problem
from kernelblaster.harness.header import generate_header
from kernelblaster.harness.problem import load_problem
from kernelblaster.harness.static_check import check_source

REPO_ROOT = Path(__file__).resolve().parents[2]
DRIVER_DIR = REPO_ROOT / "harness" / "driver"
NVCC_FLAGS = ("-c", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a")
needs_kernelbench = pytest.mark.skipif(not all(case.problem.is_file() for case in ALL),
                                       reason="no KernelBench copy (set KERNELBLASTER_KERNELBENCH)")


@functools.cache
def header(problem: Path) -> str:
    return generate_header(analyse_problem(load_problem(problem), None).spec)


def test_every_kernel_in_the_folder_is_in_the_manifest() -> None:
    assert set(KERNELS_DIR.glob("*.cu")) == {case.kernel for case in ALL}


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_kernel_passes_the_source_rules(case: KernelCase) -> None:
    assert check_source(case.kernel.read_text()) == []


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_kernel_header_comment_says_whether_it_is_honest_and_names_its_problem(case: KernelCase) -> None:
    first_line = case.kernel.read_text().splitlines()[0]
    kind = "HONEST" if case.rejected_by is None else "CHEATER"
    assert first_line.startswith(f"// {kind} (problem: {case.problem.parent.name}/{case.problem.stem})")


@needs_kernelbench
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_kernel_compiles_without_warnings_against_its_problem_header(case: KernelCase, tmp_path: Path) -> None:
    (tmp_path / "kb_problem.h").write_text(header(case.problem))
    command = [shutil.which("nvcc") or "nvcc", *NVCC_FLAGS, f"-I{tmp_path}", f"-I{DRIVER_DIR}", str(case.kernel),
               "-o", str(tmp_path / "kernel.o")]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0, log
    assert "warning" not in log.lower(), log
