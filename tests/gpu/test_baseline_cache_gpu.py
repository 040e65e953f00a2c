"""A cached PyTorch baseline is served only while a quick timing now agrees with it: one measured on a busy
GPU (slower than now by more than the margin) is timed again, and the new figure replaces it."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu.cases import SOFTMAX

from kernelblaster.harness.baseline import STALE_MARGIN, baseline_for
from kernelblaster.harness.problem import load_problem
from kernelblaster.harness.result import BaselineTiming

pytestmark = pytest.mark.gpu


def _baseline(cache_dir: Path) -> BaselineTiming:
    return baseline_for(load_problem(SOFTMAX), 0, "strict", 2, cache_dir, with_compile=False)


def _cached_file(cache_dir: Path) -> Path:
    return next((cache_dir / "baselines").glob("*.json"))


def _doctor(tmp_path: Path, factor: float, samples: int) -> None:
    """Rewrite the cached eager figures (the full and the quick one) as `factor` times the measured ones, marked
    by the sample count."""
    path = _cached_file(tmp_path)
    cached = BaselineTiming.model_validate_json(path.read_text())
    assert cached.quick_eager_ms is not None
    eager = cached.eager.model_copy(update={"median_ms": cached.eager.median_ms * factor, "samples": samples})
    path.write_text(cached.model_copy(update={"eager": eager, "quick_eager_ms": cached.quick_eager_ms * factor})
                    .model_dump_json())


def test_a_cached_baseline_far_slower_than_the_gpu_now_is_timed_again_and_replaced(tmp_path: Path) -> None:
    measured = _baseline(tmp_path)
    _doctor(tmp_path, factor=3.0, samples=777_777)

    again = _baseline(tmp_path)

    assert again.eager.samples != 777_777 and again.eager.median_ms < measured.eager.median_ms * STALE_MARGIN
    assert BaselineTiming.model_validate_json(_cached_file(tmp_path).read_text()) == again


def test_a_cached_baseline_that_agrees_with_the_gpu_now_is_served_from_the_cache(tmp_path: Path) -> None:
    _baseline(tmp_path)
    _doctor(tmp_path, factor=1.0, samples=777_777)

    assert _baseline(tmp_path).eager.samples == 777_777


def test_a_cached_baseline_faster_than_the_gpu_now_is_kept(tmp_path: Path) -> None:
    # The GPU may be the busy one now: a figure taken under that load would be the wrong one to keep.
    _baseline(tmp_path)
    _doctor(tmp_path, factor=0.5, samples=777_777)

    assert _baseline(tmp_path).eager.samples == 777_777
