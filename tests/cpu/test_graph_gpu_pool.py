"""The GPU pool: one job at a time per GPU, several GPUs sharing the jobs, one worker made per GPU."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelblaster.graph.core.gpu_pool import GpuPool

JOB_SECONDS = 0.05


class _Busy:
    """Records, per GPU, how many jobs ran on it at once at most, and overall."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[int, int] = {}
        self.most_per_gpu = 0
        self.most_overall = 0

    def job(self, pool: GpuPool[int]) -> None:
        with pool.acquire() as gpu:
            with self.lock:
                self.running[gpu] = self.running.get(gpu, 0) + 1
                self.most_per_gpu = max(self.most_per_gpu, self.running[gpu])
                self.most_overall = max(self.most_overall, sum(self.running.values()))
            time.sleep(JOB_SECONDS)
            with self.lock:
                self.running[gpu] -= 1


def _noting(made: list[int]) -> Callable[[int], int]:
    """A worker factory noting each GPU it makes a worker for; the worker is the GPU's index."""

    def make(gpu: int) -> int:
        made.append(gpu)
        return gpu

    return make


def _run_jobs(pool: GpuPool[int], jobs: int) -> _Busy:
    busy = _Busy()
    with ThreadPoolExecutor(max_workers=jobs) as executor:
        for future in [executor.submit(busy.job, pool) for _ in range(jobs)]:
            future.result()
    return busy


def test_jobs_on_one_gpu_never_overlap() -> None:
    busy = _run_jobs(GpuPool([0], make_worker=lambda gpu: gpu), jobs=6)
    assert busy.most_per_gpu == 1


def test_two_gpus_share_the_jobs_one_at_a_time_each() -> None:
    busy = _run_jobs(GpuPool([0, 1], make_worker=lambda gpu: gpu), jobs=8)
    assert (busy.most_per_gpu, busy.most_overall) == (1, 2)


def test_each_gpus_worker_is_made_once_on_first_use() -> None:
    made: list[int] = []
    pool = GpuPool([3, 5], make_worker=_noting(made))
    _run_jobs(pool, jobs=8)
    assert sorted(made) == [3, 5]


def test_work_without_a_gpu_reuses_an_existing_worker() -> None:
    made: list[int] = []
    pool = GpuPool([0], make_worker=_noting(made))
    assert pool.any_worker() == 0 and pool.any_worker() == 0
    assert made == [0]


def test_a_pool_needs_a_gpu() -> None:
    with pytest.raises(ValueError, match="at least one GPU"):
        GpuPool([], make_worker=lambda gpu: gpu)
