"""Bad input met below the command line: an arch the installed nvcc cannot compile for is the user's error
wherever it comes from (a flag, a detected GPU, the Python API), never a candidate's compile error; an empty
comma-separated value means an empty list, while an empty item in one is a mistake."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.nvcc import arch_problem, compile_object
from kernelblaster.tools.options import GpuIndices, Libraries

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@needs_nvcc
def test_compiling_for_an_arch_nvcc_does_not_know_is_a_user_error_before_nvcc_sees_the_source(
        tmp_path: Path) -> None:
    source = tmp_path / "candidate.cu"
    source.write_text("this is not CUDA\n")  # were it compiled, its errors would be the compile error
    with pytest.raises(UserFacingError, match=r"^nvcc [\d.]+ cannot compile for sm_80a; it supports sm_\d+"):
        compile_object(source, tmp_path / "candidate.o", arch="sm_80a", include_dirs=[], cache_dir=None,
                       sandbox=None)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
def test_an_arch_nvcc_compiles_for_raises_no_problem(arch: str) -> None:
    assert arch_problem(arch) is None


def test_an_empty_allow_value_allows_no_library() -> None:
    assert TypeAdapter(Libraries).validate_python("") == ()


def test_an_empty_gpus_value_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least 1 item"):
        TypeAdapter(GpuIndices).validate_python("")
