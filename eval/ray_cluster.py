"""Suites on a Ray cluster (`--ray auto|ADDRESS`; `pip install 'kernelblaster[cluster]'`): one task per problem
with one GPU, in a fresh worker process each, and the suite's KB held by one actor (`SuiteKB`) that
applies each problem's learning in suite order. The runner's loop is the same as on one host.

The suite directory must be on a filesystem every node sees: tasks write their problems' run directories
(checkpoints, kernels, KB journals) there, and a resumed suite finds them again.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from pydantic import BaseModel

from kernelblaster.eval.local_launcher import Finished, Message, ServicesFactory, Task
from kernelblaster.eval.results import KBVersionRow
from kernelblaster.eval.suite import Suite
from kernelblaster.eval.suite_kb import SuiteKB
from kernelblaster.kb.journal import KBChange
from kernelblaster.tools.errors import UserFacingError


def cluster_gpus(address: str) -> int:
    """GPUs the cluster at `address` has."""
    return int(_connected(address).cluster_resources().get("GPU", 0))


def connect(address: str, suite: Suite, services_factory: ServicesFactory) -> tuple[RayLauncher, RemoteSuiteKB]:
    """The launcher of problem tasks and the KB actor of `suite` on the cluster at `address`."""
    ray = _connected(address)
    actor = ray.remote(SuiteKB).options(num_cpus=0).remote(suite.kb_directory, suite.db.versions())
    return RayLauncher(ray, suite.config.window, services_factory), RemoteSuiteKB(ray, actor, suite.db.versions())


class RemoteSuiteKB:
    """The KB actor, called like a local `SuiteKB`."""

    def __init__(self, ray: ModuleType, actor: Any, versions: Sequence[KBVersionRow]) -> None:
        self._ray = ray
        self._actor = actor
        self._latest = len(versions) - 1

    @property
    def latest(self) -> int:
        return self._latest  # only `submit`, through this object, makes versions

    def document_bytes(self, version: int) -> bytes:
        document: bytes = self._ray.get(self._actor.document_bytes.remote(version))
        return document

    def submit(self, position: int, changes: Sequence[KBChange]) -> list[KBVersionRow]:
        made: list[KBVersionRow] = self._ray.get(self._actor.submit.remote(position, list(changes)))
        self._latest += len(made)
        return made


class RayLauncher:
    """Problem tasks on the cluster, `slots` at a time, each asking for one GPU."""

    def __init__(self, ray: ModuleType, slots: int, services_factory: ServicesFactory) -> None:
        from ray.util.queue import Queue

        self._ray = ray
        self._slots = slots
        self._services_factory = services_factory
        self._events = Queue()
        self._remote_task = ray.remote(num_gpus=1, max_calls=1)(_cluster_task)
        self._running: dict[Any, int] = {}

    @property
    def free_slots(self) -> int:
        return self._slots - len(self._running)

    def start(self, key: int, task: Task, job: BaseModel) -> str:
        reference = self._remote_task.remote(task, job, self._services_factory, self._events)
        self._running[reference] = key
        return "ray"

    def wait(self, timeout: float) -> list[Message]:
        ready, _ = self._ray.wait(list(self._running), num_returns=len(self._running) or 1, timeout=timeout) \
            if self._running else ([], [])
        messages: list[Message] = list(self._events.get_nowait_batch(self._events.qsize()))
        for reference in ready:
            key = self._running.pop(reference)
            try:
                messages.append(Finished(key, self._ray.get(reference)))
            except Exception as error:  # the task's process died: the problem failed, not the suite
                messages.append(Finished(key, None, f"its Ray task failed: {type(error).__name__}: {error}"[:500]))
        return messages

    def close(self) -> None:
        for reference in self._running:
            self._ray.cancel(reference, force=True)
        self._running.clear()


def _cluster_task(task: Task, job: BaseModel, services_factory: ServicesFactory, events: Any) -> BaseModel:
    import ray

    node = ray.get_runtime_context().get_node_id()[:8]
    gpus = ",".join(str(gpu) for gpu in ray.get_gpu_ids())
    return task(job, services_factory(), events.put, f"{node}/gpu{gpus}")


def _connected(address: str) -> ModuleType:
    try:
        import ray
    except ImportError:
        raise UserFacingError("--ray needs Ray: pip install 'kernelblaster[cluster]'") from None
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise UserFacingError(f"--ray {address}: cannot connect to a Ray cluster ({error})") from None
    return ray
