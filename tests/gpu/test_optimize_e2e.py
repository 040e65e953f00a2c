"""End to end on a GPU: the scripted agents write a kernel that does not compile, then a wrong one, then the
fast example; the run is killed (SIGKILL) once the wrong one is rejected and resumed; it ends with the fast
kernel as best.cu and its measured speedup learned by the KB, counted once.

The agents are scripted (tests/fixtures/graph/e2e_driver.py); the harness, nvcc, the driver, timing and
profiling, the graph, its checkpoints and the KB are all real.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.kb.lookup import optimization_of

from kernelblaster.kb.store import KnowledgeBase

pytestmark = pytest.mark.gpu
TESTS = Path(__file__).resolve().parents[1]
DRIVER = TESTS / "fixtures" / "graph" / "e2e_driver.py"
FAST = TESTS.parent / "examples" / "candidates" / "elementwise_swish_scale" / "fast.cu"
KILL_AFTER = "verify\twrong"
KILL_DEADLINE_S = 900
RESUME_TIMEOUT_S = 1200


def _driver(*args: str) -> list[str]:
    return [sys.executable, str(DRIVER), *args]


def _environment(tmp_path: Path) -> dict[str, str]:
    inherited = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    return os.environ | {"PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent), *inherited]),
                         "KERNELBLASTER_CACHE": str(tmp_path / "cache")}


def _run_until_killed(tmp_path: Path, run_dir: Path, kb_path: Path, log_path: Path) -> None:
    log_path.touch()
    started = subprocess.Popen(_driver("start", str(run_dir), str(kb_path), str(log_path)),
                               env=_environment(tmp_path), start_new_session=True)
    deadline = time.monotonic() + KILL_DEADLINE_S
    try:
        while KILL_AFTER not in log_path.read_text():
            assert started.poll() is None, f"the run ended (status {started.returncode}) before it could be killed"
            assert time.monotonic() < deadline, f"no '{KILL_AFTER}' progress within {KILL_DEADLINE_S} s"
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have ended on its own: the assertion says why
            os.killpg(started.pid, signal.SIGKILL)
        started.wait()


def test_optimize_survives_a_kill_and_ends_with_the_faster_kernel_learned_once(tmp_path: Path) -> None:
    run_dir, kb_path, log_path = tmp_path / "run", tmp_path / "kb" / "kb.json", tmp_path / "progress.log"
    KnowledgeBase.create(kb_path)
    _run_until_killed(tmp_path, run_dir, kb_path, log_path)
    assert not (run_dir / "report.json").exists()

    resumed = subprocess.run(_driver("resume", str(run_dir), str(log_path)), env=_environment(tmp_path),
                             timeout=RESUME_TIMEOUT_S, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    assert (run_dir / "best.cu").read_text() == FAST.read_text()
    report = json.loads((run_dir / "report.json").read_text())
    (step,) = report["steps"]
    assert (step["outcome"], step["attempts"]) == ("measured", 3)
    assert step["speedup"] > 1.0 and report["speedups"]["vs_initial"] == pytest.approx(step["speedup"])
    assert "build failed" in log_path.read_text()
    state = KnowledgeBase.load(kb_path).document.resolve_state(step["state_id"])
    stats = optimization_of(state, step["technique"]).stats
    assert (stats.attempts, stats.measured) == (1, 1)
    assert stats.geomean_speedup == pytest.approx(step["speedup"], rel=1e-3)
