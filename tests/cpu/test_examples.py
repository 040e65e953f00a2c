"""The example problems and kernels under examples/: problems load on the CPU, every kernel passes the source
rules and compiles against its problem's generated header, and the manifest (tests/gpu/cases.py) names
exactly the files that exist. Whether each kernel is accepted or rejected is a GPU test."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from gpu import cases

from kernelblaster.harness.header import generate_header
from kernelblaster.harness.problem import instantiate, load_problem
from kernelblaster.harness.result import CHECK_ORDER as HARNESS_CHECK_ORDER
from kernelblaster.harness.spec import ProblemSpec, derive_spec
from kernelblaster.harness.static_check import check_source

REPO_ROOT = Path(__file__).resolve().parents[2]
DRIVER_DIR = REPO_ROOT / "harness" / "driver"
NVCC_FLAGS = ("-c", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a")

PROBLEMS = sorted({example.problem for example in cases.EXAMPLES})
# (id, kernel, problem) for every kernel in the manifest.
KERNELS: list[tuple[str, Path, Path]] = [
    *((f"{e.id}/{kernel.stem}", kernel, e.problem) for e in cases.EXAMPLES for kernel in (e.naive, e.fast)),
    *((f"cheaters/{c.id}", c.candidate, c.problem) for c in cases.REJECTED),
    *((f"unusual/{c.id}", c.candidate, c.problem) for c in cases.ACCEPTED),
    *((f"sanitizer/{c.id}", c.candidate, c.problem) for c in cases.SANITIZED),
]
KERNEL_PARAMS = [pytest.param(kernel, problem, id=kernel_id) for kernel_id, kernel, problem in KERNELS]
LABELLED: tuple[cases.CheatCase | cases.AcceptCase | cases.SanitizerCase, ...] = (
    *cases.REJECTED, *cases.ACCEPTED, *cases.SANITIZED)
LABELLED_CASES = [pytest.param(c, id=c.id) for c in LABELLED]


@functools.cache
def problem_spec(problem: Path) -> ProblemSpec:
    return derive_spec(instantiate(load_problem(problem), 0, "cpu"))


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.stem)
def test_problem_loads_and_derives_a_spec_on_the_cpu(problem: Path) -> None:
    spec = problem_spec(problem)
    assert spec.problem_name == problem.stem
    assert spec.inputs and spec.outputs


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.stem)
def test_problem_inputs_and_outputs_are_float32(problem: Path) -> None:
    spec = problem_spec(problem)
    float_params = [p for p in spec.params if p.dtype.startswith(("float", "bfloat"))]
    assert {t.dtype for t in [*spec.inputs, *spec.outputs, *float_params]} == {"float32"}


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.stem)
def test_problem_reference_is_deterministic_under_a_seed(problem: Path) -> None:
    first = instantiate(load_problem(problem), 3, "cpu")
    second = instantiate(load_problem(problem), 3, "cpu")
    for a, b in zip(first.reference(), second.reference(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(("kernel", "problem"), KERNEL_PARAMS)
def test_kernel_passes_the_source_rules(kernel: Path, problem: Path) -> None:
    # Cheaters too: each must reach the GPU check it targets, not be stopped by a source rule.
    assert check_source(kernel.read_text()) == []


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize(("kernel", "problem"), KERNEL_PARAMS)
def test_kernel_compiles_without_warnings_against_its_problem_header(kernel: Path, problem: Path,
                                                                    tmp_path: Path) -> None:
    (tmp_path / "kb_problem.h").write_text(generate_header(problem_spec(problem)))
    command = [shutil.which("nvcc") or "nvcc", *NVCC_FLAGS, f"-I{tmp_path}", f"-I{DRIVER_DIR}", str(kernel),
               "-o", str(tmp_path / "kernel.o")]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0, log
    assert "warning" not in log.lower(), log


@pytest.mark.parametrize(("kernel", "problem"), KERNEL_PARAMS)
def test_manifest_names_existing_files(kernel: Path, problem: Path) -> None:
    assert kernel.is_file()
    assert problem.is_file()


def test_every_kernel_under_examples_is_in_the_manifest() -> None:
    on_disk = set(cases.EXAMPLES_DIR.rglob("*.cu"))
    assert on_disk == {kernel for _, kernel, _ in KERNELS}


def test_every_problem_under_examples_has_naive_and_fast_candidates() -> None:
    assert set(cases.PROBLEMS_DIR.glob("*.py")) == set(PROBLEMS)


def test_manifest_check_order_is_the_harness_check_order() -> None:
    assert cases.CHECK_ORDER == HARNESS_CHECK_ORDER


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in cases.REJECTED])
def test_cheater_expects_gpu_verification_checks(case: cases.CheatCase) -> None:
    # static and compile must pass for a cheater; it is caught by a check that runs it.
    assert case.expected_checks
    assert case.expected_checks <= set(cases.CHECK_ORDER) - {"static", "compile"}


@pytest.mark.parametrize("case", LABELLED_CASES)
def test_kernel_header_comment_names_its_manifest_problem(
        case: cases.CheatCase | cases.AcceptCase | cases.SanitizerCase) -> None:
    first_line = case.candidate.read_text().splitlines()[0]
    assert f"(problem: {case.problem.stem})" in first_line
