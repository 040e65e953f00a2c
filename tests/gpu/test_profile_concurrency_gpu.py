"""Two evaluations profiled at once on one host both get their profile: Nsight Compute collects for one process
per host at a time, and a candidate's run holds the host's profiler only from its profiled call to ncu's end
(harness/profile/run.py), so the two ncu starts, driver starts and setups overlap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu.cases import EXAMPLES

pytestmark = pytest.mark.gpu


def test_two_evaluations_profiled_at_once_on_one_host_both_get_their_profile(cache_dir: Path) -> None:
    example = EXAMPLES[0]
    command = [sys.executable, "-m", "kernelblaster.graph", "eval", str(example.problem), str(example.fast),
               "--json", "--profile"]
    environment = {**os.environ, "KERNELBLASTER_CACHE": str(cache_dir)}
    both = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
            for _ in range(2)]
    replies = [process.communicate(timeout=600) for process in both]
    reports = [json.loads(stdout) for stdout, _ in replies]
    assert [process.returncode for process in both] == [0, 0], [stderr[-2000:] for _, stderr in replies]
    assert [report["profile"]["status"] for report in reports] == ["ok", "ok"], [r["profile"] for r in reports]
    assert all("profile_wait" in report["stages"] for report in reports)
