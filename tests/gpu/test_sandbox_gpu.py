"""The GPU sandbox on a GPU machine: CUDA starts inside it, and a candidate runs, times and profiles in it.

When CUDA cannot start in the sandbox, the first test's message carries what the sandbox showed (its
/dev, /proc/driver/nvidia and the CUDA error), which is what a fix needs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from gpu.cases import EXAMPLES

from kernelblaster.harness.evaluate import EvalOptions, evaluate_candidate
from kernelblaster.harness.profile.outcome import ProfileReport
from kernelblaster.tools.sandbox import SandboxView, require_sandbox

pytestmark = pytest.mark.gpu

CUDA_PROBE = """
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
count = ctypes.c_int()
print("cuInit", cuda.cuInit(0), "cuDeviceGetCount", cuda.cuDeviceGetCount(ctypes.byref(count)), "devices", count.value)
"""


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="probes CUDA with the system's python3")
def test_cuda_starts_inside_the_gpu_sandbox() -> None:
    sandbox = require_sandbox(unsafe_no_sandbox=False)
    assert sandbox is not None
    script = f"ls -l /dev /proc/driver/nvidia; /usr/bin/python3 -c '{CUDA_PROBE}'"
    launch = sandbox.launch(["/bin/sh", "-c", script], SandboxView(gpu=True))
    done = subprocess.run(launch.argv, env=launch.env, capture_output=True, text=True, timeout=120, check=False)
    assert "cuInit 0 cuDeviceGetCount 0" in done.stdout, f"{done.stdout}\n{done.stderr}\n{' '.join(launch.argv)}"


def test_a_candidate_verifies_times_and_profiles_in_the_sandbox(tmp_path: Path) -> None:
    swish = EXAMPLES[0]
    result = evaluate_candidate(swish.problem, swish.fast, EvalOptions(cache_dir=tmp_path, baseline=False,
                                                                       profile=True))
    assert result.verdict == "ok", result.summary
    assert isinstance(result.profile, ProfileReport), result.profile
    assert result.profile.kernel_count >= 1
