"""The GPU pool: verification, timing and profiling run one at a time per GPU, and several GPUs share them.

Compiles need no GPU and run in parallel outside the pool. A job waits for any idle GPU and gets the
worker bound to it (the harness evaluator of that device), so two jobs never time each other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Generic, TypeVar

W = TypeVar("W")


class GpuPool(Generic[W]):
    """A set of GPUs, each with its worker, handed out to one job at a time."""

    def __init__(self, gpus: Sequence[int], make_worker: Callable[[int], W]) -> None:
        if not gpus:
            raise ValueError("a GPU pool needs at least one GPU")
        self.gpus = tuple(dict.fromkeys(gpus))
        self._make_worker = make_worker
        self._workers: dict[int, W] = {}
        self._idle = list(self.gpus)
        self._changed = threading.Condition()

    @contextmanager
    def acquire(self) -> Iterator[W]:
        """Hold an idle GPU for the block (waiting for one if all are busy) and use its worker."""
        with self._changed:
            self._changed.wait_for(lambda: bool(self._idle))
            gpu = self._idle.pop(0)
        try:
            # Made while its GPU is held: making one (deriving the problem's spec) runs on the GPU.
            if gpu not in self._workers:
                self._workers[gpu] = self._make_worker(gpu)
            yield self._workers[gpu]
        finally:
            with self._changed:
                self._idle.append(gpu)
                self._changed.notify()

    def take_workers(self) -> list[W]:
        """Hand over every worker made so far and forget them (the work they served is over); a later job
        makes a new one."""
        with self._changed:
            workers = list(self._workers.values())
            self._workers.clear()
        return workers

    def any_worker(self) -> W:
        """A worker for work that needs no GPU (compiling); made on a held GPU if there is none yet."""
        if self._workers:
            return next(iter(self._workers.values()))
        with self.acquire() as worker:
            return worker
