"""The Python API example the README shows runs, and explains what it needs when that is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "optimize_example.py"


def _example(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OPENAI_")}
    return subprocess.run([sys.executable, str(EXAMPLE), *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=environment | {"XDG_DATA_HOME": str(tmp_path / "data")})


def test_the_api_example_names_the_missing_endpoint_in_one_line(tmp_path: Path) -> None:
    finished = _example(tmp_path)
    assert finished.returncode == 2
    assert finished.stderr.startswith("error: no LLM endpoint configured") and finished.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="specifies the behaviour without a GPU")
def test_the_api_example_takes_the_llm_its_error_suggests_and_then_names_the_missing_gpu(tmp_path: Path) -> None:
    finished = _example(tmp_path, "--llm", "human")
    assert finished.returncode == 2
    assert finished.stderr.startswith("error: cannot run here: the run needs an NVIDIA GPU")
    assert finished.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="specifies the behaviour without a GPU")
def test_the_api_example_takes_the_no_profile_its_error_names(tmp_path: Path) -> None:
    finished = _example(tmp_path, "--llm", "human", "--no-profile")
    assert finished.returncode == 2
    assert finished.stderr.startswith("error: cannot run here: the run needs an NVIDIA GPU")
    assert "ncu" not in finished.stderr and finished.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_a_bad_setting_given_to_the_api_example_is_one_line_naming_it(tmp_path: Path) -> None:
    finished = _example(tmp_path, "--base-url", "notaurl")
    assert finished.returncode == 2
    assert finished.stderr == ("error: base_url notaurl: expected an http:// or https:// URL such as "
                               "http://127.0.0.1:8000/v1\n")
    assert not (tmp_path / "runs").exists()
