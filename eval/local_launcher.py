"""Tasks of a suite on this host's GPUs: one process per task, each seeing only its GPU, at most one task per
GPU. A crash or a hang of one problem stays in its process, and every task process dies with the suite
runner (a runner killed with kill -9 leaves none behind to race its resumed successor).

Processes come from a fork server that imported the worker once, so starting one costs milliseconds.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kernelblaster.graph.core.services import Services
from kernelblaster.tools.errors import UserFacingError

ServicesFactory = Callable[[], Services]
# A task runs one job with the services, a way to report events, and its slot's name; it returns the result.
Task = Callable[[Any, Services, Callable[[BaseModel], None], str], BaseModel]
_RUNNER_CHECK_S = 0.5
_PRELOADED = ["kernelblaster.eval.worker", "kernelblaster.eval.baseline"]


@dataclass(frozen=True)
class Finished:
    """A task that ended: its result, or None if its process died without one (and how)."""

    key: int
    result: BaseModel | None
    why: str = ""


Message = BaseModel | Finished


class LocalLauncher:
    """Runs tasks in processes, one per GPU of `gpus` at a time."""

    def __init__(self, gpus: Sequence[int], services_factory: ServicesFactory) -> None:
        self._visible = {gpu: only_device(gpu) for gpu in gpus}
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(_PRELOADED)
        self._services_factory = services_factory
        self._messages = self._context.Queue()
        self._idle = list(dict.fromkeys(gpus))
        self._running: dict[int, tuple[BaseProcess, int]] = {}

    @property
    def free_slots(self) -> int:
        return len(self._idle)

    def start(self, key: int, task: Task, job: BaseModel) -> str:
        """Run `task(job)` on an idle GPU; the slot's name (`gpu3`)."""
        gpu = self._idle.pop(0)
        process = self._context.Process(target=_task_process, daemon=False,
                                        args=(task, job, self._services_factory, self._messages, gpu,
                                              self._visible[gpu], key, os.getpid()))
        process.start()
        self._running[key] = (process, gpu)
        return f"gpu{gpu}"

    def wait(self, timeout: float) -> list[Message]:
        """Events and finished tasks, waiting up to `timeout` seconds for the first."""
        messages = self._drain(timeout)
        finished = {m.key for m in messages if isinstance(m, Finished)}
        for key, (process, _) in list(self._running.items()):
            if key not in finished and not process.is_alive():
                # Everything it sent is in the pipe once it has exited: read it before calling it lost.
                messages += self._drain(0.2)
                if not any(isinstance(m, Finished) and m.key == key for m in messages):
                    messages.append(Finished(key, None, f"its process exited with status {process.exitcode}"))
        for message in messages:
            if isinstance(message, Finished) and message.key in self._running:
                process, gpu = self._running.pop(message.key)
                process.join()
                self._idle.append(gpu)
        return messages

    def close(self) -> None:
        for process, _ in self._running.values():
            process.kill()
            process.join()
        self._running.clear()

    def _drain(self, timeout: float) -> list[Message]:
        messages: list[Message] = []
        try:
            messages.append(self._messages.get(timeout=timeout))
            while True:
                messages.append(self._messages.get_nowait())
        except queue.Empty:
            return messages


def only_device(gpu: int) -> str:
    """The CUDA_VISIBLE_DEVICES that shows a task device `gpu` alone, `gpu` numbered as this process numbers
    devices. Under an inherited CUDA_VISIBLE_DEVICES (a scheduler's, a shared machine's) device 1 is its second
    entry, not physical GPU 1: at c761bb5 a suite given devices 2,3 of a host timed on 0 and 1, beside other work."""
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    if inherited is None:
        return str(gpu)
    entries = visible_entries(inherited)
    if gpu >= len(entries):
        raise UserFacingError(f"GPU {gpu} is not among the {len(entries)} devices CUDA_VISIBLE_DEVICES="
                              f"{inherited!r} shows this process (devices are numbered from 0 within it)")
    return entries[gpu]


def visible_entries(value: str) -> list[str]:
    """The devices a CUDA_VISIBLE_DEVICES value shows, read as CUDA reads it: up to the first empty or negative
    entry, and none at all when one repeats."""
    entries: list[str] = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry or entry.startswith("-"):
            break
        entries.append(entry)
    return entries if len(set(entries)) == len(entries) else []


def _task_process(task: Task, job: BaseModel, services_factory: ServicesFactory, messages: Any, gpu: int,
                  visible: str, key: int, runner_pid: int) -> None:
    threading.Thread(target=_die_with_runner, args=(runner_pid,), daemon=True).start()
    # Ctrl-C reaches the whole process group; the runner alone decides what stops (and resumes later).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["CUDA_VISIBLE_DEVICES"] = visible
    result = task(job, services_factory(), messages.put, f"gpu{gpu}")
    messages.put(Finished(key, result))
    messages.close()
    messages.join_thread()


def _die_with_runner(runner_pid: int) -> None:
    """Kill this process as soon as the runner is gone (the fork server, its parent, outlives the runner)."""
    while _alive(runner_pid):
        time.sleep(_RUNNER_CHECK_S)
    os.kill(os.getpid(), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    # A killed runner not yet reaped by its parent is a zombie: gone all the same.
    return not status.exists() or status.read_text().rsplit(")", 1)[-1].split()[0] != "Z"
