"""One forward pass of a problem, off the GPU where possible, and what the harness plans with from it: the
spec, the peak bytes the pass holds beyond its arguments, the FLOPs it performs, the kinds of operation
it computes (for the KB's choice of techniques) and the rows its softmaxes, norms, reductions and losses
reduce (for the first kernel's design).

The pass runs on the meta device (shapes only: a 16 GiB problem costs nothing) with the tensors it creates
tracked as they come and go. Models the meta device cannot run (data-dependent shapes) fall back to the GPU
when one is given, else to the CPU, but only up to `CPU_PASS_LIMIT_BYTES` of inputs and parameters (a
larger CPU pass would take the machine's memory: `SpecNeedsGpu`). Small recurrent models run untracked, on
the GPU (its allocator then measures the footprint) or else the CPU: under any tracking mode, and on meta,
PyTorch decomposes an RNN into per-step operators, which takes minutes where the fused kernel takes a second.

An analysis is kept for the process, and, given a cache folder, on disk (`analysis/` there) under everything it
depends on: the problem's name and content, the GPU (index and name), torch's and Python's versions and the
source of the harness and KB modules that make it. A later process (`eval` runs one per candidate) reads it
back instead of running the pass again; an entry that is damaged or made under another key is made anew.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, Field, ValidationError
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from kernelblaster.harness.cuda_device import device_name
from kernelblaster.harness.operations import OperationRecorder, ReducedRows
from kernelblaster.harness.problem import Problem, ProblemError, ProblemInstance, ProblemTimedOut, instantiate
from kernelblaster.harness.semantics import SemanticsRecorder
from kernelblaster.harness.spec import ProblemSpec, run_forward, spec_from_output
from kernelblaster.kb.operations import OperationKind
from kernelblaster.tools.files import write_atomically

# Recurrent models on the CPU only while their arguments stay this small (they are KB-sized in KernelBench).
CPU_FIRST_LIMIT_BYTES = 1 << 30
# Without a GPU, a model the meta device cannot run is run on the CPU only up to this many bytes of inputs
# and parameters: a 3.6 GB input took 13.5 GB and 43 s there.
CPU_PASS_LIMIT_BYTES = 1 << 30


class SpecNeedsGpu(ProblemError):
    """Without a GPU the spec would need a CPU run of the model beyond `CPU_PASS_LIMIT_BYTES`."""


class ForwardFootprint(BaseModel):
    """What one reference forward pass needs besides its inputs and parameters."""

    peak_bytes: int = Field(description="Most bytes of tensors the forward pass created that were alive at once "
                                        "(its outputs and intermediates; library workspaces not included), bytes")
    flops: int = Field(description="Floating-point operations of the pass as PyTorch's FLOP counter sees them "
                                   "(matrix products and convolutions; elementwise work counts as zero)")
    tracked: bool = Field(default=True, description="False when the pass ran untracked (small recurrent models): "
                                                    "flops is then 0, and peak_bytes, off the GPU, an upper bound")


@dataclass(frozen=True)
class ProblemAnalysis:
    spec: ProblemSpec
    footprint: ForwardFootprint
    device: str  # where the forward pass ran: "meta", "cpu" or "cuda:N"
    operations: frozenset[OperationKind] | None  # None where the pass ran untracked
    rows: tuple[ReducedRows, ...] | None = None  # what its row-family operators reduce; None where untracked


class StoredAnalysis(BaseModel):
    """A `ProblemAnalysis` as the disk cache keeps it, with the key it was made under."""

    key: str
    spec: ProblemSpec
    footprint: ForwardFootprint
    device: str
    operations: list[OperationKind] | None
    rows: list[ReducedRows] | None

    def analysis(self) -> ProblemAnalysis:
        return ProblemAnalysis(self.spec, self.footprint, self.device,
                               None if self.operations is None else frozenset(self.operations),
                               None if self.rows is None else tuple(self.rows))


# Analyses made in this process (a few hundred bytes each): see `analyse_problem`.
_ANALYSES: dict[tuple[str, str, int | None], ProblemAnalysis] = {}
_ANALYSES_LOCK = threading.Lock()
# The packages whose source makes an analysis: a change to any of their modules makes every stored one stale.
_SOURCE_PACKAGES = ("harness", "kb")


def analyse_problem(problem: Problem, gpu: int | None, cache_dir: Path | None = None) -> ProblemAnalysis:
    """Derive the spec and footprint on the cheapest device that can run the model (see the module docstring).

    The result is kept for the process by what it depends on, the problem's name and content and the GPU: a
    run's preflight (on the user's file) and its evaluator (on the run's copy) share one pass, a GPU pass for
    a model that shapes alone cannot run. With `cache_dir`, it is also kept on disk for later processes; a
    problem whose pass fails is never stored, so its error is raised again every time."""
    key = (problem.name, problem.sha256, gpu)
    with _ANALYSES_LOCK:
        kept = _ANALYSES.get(key)
    if kept is not None:
        return kept
    analysis = _analyse_anew(problem, gpu) if cache_dir is None else _stored_or_anew(problem, gpu, cache_dir)
    with _ANALYSES_LOCK:
        _ANALYSES[key] = analysis
    return analysis


def forget_analyses() -> None:
    """Forget the analyses this process made (a benchmark's first candidate of a problem pays for its own)."""
    with _ANALYSES_LOCK:
        _ANALYSES.clear()


def analysis_key(problem: Problem, gpu: int | None) -> str:
    """Everything a stored analysis of `problem` must have been made under to be used, spelt out."""
    device = "no GPU" if gpu is None else f"GPU {gpu} ({device_name(gpu)})"  # no CUDA start: the driver's
    return (f"problem {problem.name} sha256 {problem.sha256}; {device}; torch {torch.__version__}; "
            f"python {sys.version.split()[0]}; source {_source_digest()}")


def analysis_path(problem: Problem, gpu: int | None, cache_dir: Path) -> Path:
    digest = hashlib.sha256(analysis_key(problem, gpu).encode()).hexdigest()[:16]
    return cache_dir / "analysis" / f"{problem.sha256[:16]}-{digest}.json"


def _stored_or_anew(problem: Problem, gpu: int | None, cache_dir: Path) -> ProblemAnalysis:
    key = analysis_key(problem, gpu)
    path = analysis_path(problem, gpu, cache_dir)
    try:
        stored = StoredAnalysis.model_validate_json(path.read_bytes())
        if stored.key == key:
            return stored.analysis()
    except (OSError, ValidationError, ValueError):  # absent, unreadable or damaged: made anew below
        pass
    analysis = _analyse_anew(problem, gpu)
    entry = StoredAnalysis(key=key, spec=analysis.spec, footprint=analysis.footprint, device=analysis.device,
                           operations=None if analysis.operations is None else sorted(analysis.operations),
                           rows=None if analysis.rows is None else list(analysis.rows))
    with contextlib.suppress(OSError):  # a cache that cannot be written costs the next process time, nothing else
        write_atomically(path, entry.model_dump_json().encode())
    return analysis


@cache
def _source_digest() -> str:
    """A digest of the Python source of the packages that make an analysis (read once per process)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in _SOURCE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _analyse_anew(problem: Problem, gpu: int | None) -> ProblemAnalysis:
    if _recurrent_and_small(problem):
        return _untracked_on_gpu(problem, gpu) if gpu is not None else _untracked_on_cpu(problem)
    try:
        return _analyse_on(problem, "meta")
    except ProblemTimedOut:
        raise
    except ProblemError:
        if gpu is not None:
            return _analyse_on(problem, f"cuda:{gpu}")
        _refuse_a_large_cpu_pass(problem)
        with _one_cpu_thread():
            return _analyse_on(problem, "cpu")


def _refuse_a_large_cpu_pass(problem: Problem) -> None:
    instance = _built_on_meta(problem)
    if instance is None:
        return  # not even buildable on meta: the CPU pass names the problem's own error
    needed = sum(_nbytes(t) for t in [*instance.tensor_args, *instance.initial_state.values()])
    if needed > CPU_PASS_LIMIT_BYTES:
        raise SpecNeedsGpu(
            f"{problem.path}: its forward pass cannot run on shapes alone (output shapes that depend on the data, "
            f"or a failing forward), and running it on the CPU would take {needed / 2**30:.1f} GiB of inputs and "
            f"parameters (more than {CPU_PASS_LIMIT_BYTES / 2**30:g} GiB); run this on a GPU")


def spec_for_problem(problem: Problem, gpu: int | None) -> ProblemSpec:
    return analyse_problem(problem, gpu).spec


def reduced_rows(problem: Problem, gpu: int | None) -> list[ReducedRows] | None:
    """What the problem's softmaxes, norms, reductions and losses reduce (the analysis a run's preflight and
    evaluator share); None where the pass ran untracked or the problem cannot be analysed here."""
    try:
        rows = analyse_problem(problem, gpu).rows
    except ProblemError:
        return None
    return None if rows is None else list(rows)


def _analyse_on(problem: Problem, device: str) -> ProblemAnalysis:
    instance = instantiate(problem, 0, device)
    tracker, operations = _LiveTensorTracker(_argument_tensors(instance)), OperationRecorder(instance.model)
    semantics = SemanticsRecorder(instance.model)
    with FlopCounterMode(display=False) as flops, tracker, operations, semantics.watching():
        raw_output = run_forward(instance)
    footprint = ForwardFootprint(peak_bytes=tracker.peak_bytes, flops=int(flops.get_total_flops()))
    return ProblemAnalysis(_spec(instance, raw_output, semantics), footprint, device, operations.kinds(),
                           operations.reduced_rows())


def _spec(instance: ProblemInstance, raw_output: Any, semantics: SemanticsRecorder) -> ProblemSpec:
    return spec_from_output(instance, raw_output, semantics.lines)


def _untracked_on_gpu(problem: Problem, gpu: int) -> ProblemAnalysis:
    device = f"cuda:{gpu}"
    instance = instantiate(problem, 0, device)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    semantics = SemanticsRecorder(instance.model)
    with semantics.modules_only():
        raw_output = run_forward(instance)
    torch.cuda.synchronize(device)
    footprint = ForwardFootprint(peak_bytes=torch.cuda.max_memory_allocated(device) - before, flops=0, tracked=False)
    return ProblemAnalysis(_spec(instance, raw_output, semantics), footprint, device, None)


def _untracked_on_cpu(problem: Problem) -> ProblemAnalysis:
    with _one_cpu_thread():
        instance = instantiate(problem, 0, "cpu")
        semantics = SemanticsRecorder(instance.model)
        with semantics.modules_only():
            raw_output = run_forward(instance)
    footprint = ForwardFootprint(peak_bytes=CPU_FIRST_LIMIT_BYTES, flops=0, tracked=False)
    return ProblemAnalysis(_spec(instance, raw_output, semantics), footprint, "cpu", None)


def _built_on_meta(problem: Problem) -> ProblemInstance | None:
    """The problem built on the meta device, or None if it cannot be; a step that never ends is not retried
    elsewhere (it would wait out the step time limit once per device)."""
    try:
        return instantiate(problem, 0, "meta")
    except ProblemTimedOut:
        raise
    except ProblemError:
        return None


@contextmanager
def _one_cpu_thread() -> Iterator[None]:
    """Intra-op threads of a small model spin against each other on a busy machine (an LSTM of KernelBench:
    40 s with two threads on a loaded 2-core host, 1.6 s with one), so CPU passes use one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _recurrent_and_small(problem: Problem) -> bool:
    instance = _built_on_meta(problem)
    if instance is None:
        return False  # the model cannot even be built on meta; the fallback device decides
    if not any(isinstance(module, nn.RNNBase) for module in instance.model.modules()):
        return False
    return sum(_nbytes(t) for t in _argument_tensors(instance)) <= CPU_FIRST_LIMIT_BYTES


def _argument_tensors(instance: ProblemInstance) -> list[torch.Tensor]:
    module_tensors = [*instance.model.parameters(), *instance.model.buffers()]
    return [*instance.tensor_args, *instance.initial_state.values(), *module_tensors]


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


class _LiveTensorTracker(TorchDispatchMode):
    """Peak bytes of the storages that operators create, counted while any tensor still uses them.

    Storages of the arguments and the model's state are excluded: views of them and in-place updates cost
    nothing new.
    """

    def __init__(self, existing: list[torch.Tensor]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves TorchDispatchMode.__init__ unannotated
        self._excluded = {_storage_key(t) for t in existing}
        self._live: dict[int, list[int]] = {}  # storage key -> [tensors using it, its bytes]
        self._current = 0
        self.peak_bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        result = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(result):
            if isinstance(leaf, torch.Tensor):
                self._track(leaf)
        return result

    def _track(self, tensor: torch.Tensor) -> None:
        key = _storage_key(tensor)
        if key in self._excluded:
            return
        entry = self._live.get(key)
        if entry is None:
            entry = self._live[key] = [0, tensor.untyped_storage().nbytes()]
            self._current += entry[1]
            self.peak_bytes = max(self.peak_bytes, self._current)
        entry[0] += 1
        weakref.finalize(tensor, self._release, key)

    def _release(self, key: int) -> None:
        entry = self._live[key]
        entry[0] -= 1
        if entry[0] == 0:
            self._current -= entry[1]
            del self._live[key]


def _storage_key(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage()._cdata)
