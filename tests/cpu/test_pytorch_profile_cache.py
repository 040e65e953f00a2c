"""A problem's PyTorch profile is taken once per GPU kind, precision, PyTorch and Nsight Compute and read back by
later runs (ncu profiles one process per host at a time, and every run of a suite asks for it); a failed
profile is taken again. ncu and the GPU are test doubles here: a stand-in script and a counted profiler."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelblaster.harness.profile import run
from kernelblaster.harness.profile.outcome import ProfileOutcome, ProfileReport, ProfileUnavailable
from kernelblaster.harness.profile.report import NcuReport
from kernelblaster.tools import ncu

REPORT = ProfileReport(ncu=NcuReport(kernels=[]), kernel_count=1, total_elapsed_cycles=1000.0,
                       total_gpu_time_ns=5000.0, signature=[0.5], signature_summary="half", findings="one kernel")


class CountedProfiler:
    """Stands in for `profile_pytorch`: counts the profiles taken and returns the next outcome given."""

    def __init__(self, *outcomes: ProfileOutcome) -> None:
        self.outcomes = list(outcomes)
        self.taken = 0

    def __call__(self, problem_path: Path, gpu: int, precision: str, workdir: Path, timeout_s: float
                 ) -> ProfileOutcome:
        self.taken += 1
        return self.outcomes.pop(0)


@pytest.fixture
def stand_in_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "ncu"
    script.write_text('#!/bin/sh\necho "NVIDIA (R) Nsight Compute Command Line Profiler, Version 2025.3.1.0"\n')
    script.chmod(0o755)
    monkeypatch.setenv(ncu.NCU_ENV_VAR, str(script))
    monkeypatch.setattr(run, "device_name", lambda gpu: "Test Double GPU")


def _profile(tmp_path: Path, precision: str = "strict") -> ProfileOutcome:
    return run.cached_pytorch_profile(tmp_path / "problem.py", 0, precision, tmp_path, timeout_s=60.0)


@pytest.mark.usefixtures("stand_in_ncu")
def test_a_later_run_reads_the_profile_back_instead_of_profiling_again(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    profiler = CountedProfiler(REPORT)
    monkeypatch.setattr(run, "profile_pytorch", profiler)
    first, later = _profile(tmp_path), _profile(tmp_path)
    assert (profiler.taken, first, later) == (1, REPORT, REPORT)


@pytest.mark.usefixtures("stand_in_ncu")
def test_a_failed_profile_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiler = CountedProfiler(ProfileUnavailable(reason="ncu run failed: busy"), REPORT)
    monkeypatch.setattr(run, "profile_pytorch", profiler)
    first, later = _profile(tmp_path), _profile(tmp_path)
    assert (profiler.taken, first.status, later) == (2, "unavailable", REPORT)


@pytest.mark.usefixtures("stand_in_ncu")
def test_another_precision_policy_is_profiled_on_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiler = CountedProfiler(REPORT, REPORT)
    monkeypatch.setattr(run, "profile_pytorch", profiler)
    _profile(tmp_path, "strict")
    _profile(tmp_path, "pytorch-default")
    assert profiler.taken == 2
