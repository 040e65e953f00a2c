"""Load a KernelBench-style problem file and materialise it under a seed directly on a device.

A problem is a `.py` file defining `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`.
Models run as constructed (KernelBench's convention: training mode), and because a reference call can
mutate buffers (BatchNorm running statistics), `ProblemInstance.reference` restores the initial state
before every call.

Problem code is the user's: whatever it raises (`SystemExit` included) becomes a `ProblemError` naming the
file and the step, and on the main thread each step (import, building the model and inputs, the spec's
reference run) is stopped after `PROBLEM_STEP_TIMEOUT_S`, so a problem that sleeps cannot hang a command, and
its `os._exit` (which would end the process past every handler) becomes a `ProblemError` too.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import torch
from torch import nn

from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import read_text_file

# Generous: KernelBench problems import in well under a second and build multi-GB inputs in seconds.
PROBLEM_STEP_TIMEOUT_S = 120.0


class ProblemError(UserFacingError):
    """A problem file that cannot be loaded, constructed or run; the message names the file."""


class ProblemTimedOut(ProblemError):
    """A step of the problem's own code ran past `PROBLEM_STEP_TIMEOUT_S`: no other device will make it end."""


class _ProblemStepTimeout(BaseException):
    """Raised into problem code that ran too long; a BaseException, so its `except Exception` cannot keep it."""


class _ProblemCalledOsExit(BaseException):
    """Raised in place of `os._exit(code)` called from a step; a BaseException for the same reason."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@contextmanager
def problem_code(path: Path, step: str) -> Iterator[None]:
    """Run a step of the problem's own code: any exception, `SystemExit`, `os._exit` or overrun is a ProblemError."""
    ending = "a problem file must define its functions, not end the program"
    try:
        with _deadline(PROBLEM_STEP_TIMEOUT_S), _os_exit_refused():
            yield
    except _ProblemStepTimeout:
        raise ProblemTimedOut(f"{path}: {step} took longer than {PROBLEM_STEP_TIMEOUT_S:g} s; "
                           "a problem must not wait or loop without end") from None
    except _ProblemCalledOsExit as exit_request:
        raise ProblemError(f"{path}: {step} called os._exit({exit_request.code!r}); {ending}") from None
    except SystemExit as exit_request:
        raise ProblemError(f"{path}: {step} called exit({exit_request.code!r}); {ending}") from None
    except ProblemError:
        raise
    except Exception as error:
        raise ProblemError(f"{path}: {step} failed: {type(error).__name__}: {error}") from None


@contextmanager
def _os_exit_refused() -> Iterator[None]:
    """While the block runs on the main thread, `os._exit` called from that thread raises instead of ending the
    process (it skips every handler, so nothing else could report it)."""
    if threading.current_thread() is not threading.main_thread():
        # Patching is process-wide: another thread's step must not race the main thread's restore.
        yield
        return
    previous = os._exit
    owner = (os.getpid(), threading.get_ident())
    step_running = True

    def refuse(status: int) -> NoReturn:
        if step_running and (os.getpid(), threading.get_ident()) == owner:
            raise _ProblemCalledOsExit(status)
        # Other threads, children forked during the step (multiprocessing ends them with os._exit), and a
        # reference to this function kept past the step (`from os import _exit`) exit as asked.
        previous(status)

    os._exit = refuse
    try:
        yield
    finally:
        os._exit = previous
        step_running = False


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Interrupt the block after `seconds` (SIGALRM: only the main thread can, and only if no one else uses it)."""
    usable = (threading.current_thread() is threading.main_thread()
              and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None))
    if not usable:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise _ProblemStepTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Problem:
    path: Path
    source: str
    sha256: str
    model_class: type[nn.Module]
    get_inputs: Callable[[], list[Any]]
    get_init_inputs: Callable[[], list[Any]]

    @property
    def name(self) -> str:
        return self.path.stem


@dataclass
class ProblemInstance:
    """One seeded materialisation: the model, its forward arguments, and the model's initial state."""

    problem: Problem
    seed: int
    model: nn.Module
    init_args: list[Any]
    args: list[Any]
    initial_state: dict[str, torch.Tensor] = field(repr=False)

    @property
    def tensor_args(self) -> list[torch.Tensor]:
        return [a for a in self.args if isinstance(a, torch.Tensor)]

    def reference(self, args: list[Any] | None = None) -> list[torch.Tensor]:
        """Run the PyTorch model from its initial state; outputs always come back as a list."""
        self.model.load_state_dict(self.initial_state)
        with torch.no_grad():
            output = self.model(*(self.args if args is None else args))
        return outputs_as_list(output, self.problem)


def outputs_as_list(output: Any, problem: Problem) -> list[torch.Tensor]:
    items = list(output) if isinstance(output, tuple | list) else [output]
    if not all(isinstance(item, torch.Tensor) for item in items):
        kinds = ", ".join(type(item).__name__ for item in items)
        raise ProblemError(f"{problem.path}: Model.forward must return a tensor or a tuple of tensors, got {kinds}")
    return items


def load_problem(path: Path | str) -> Problem:
    path = Path(path)
    source = read_text_file(path, "the problem file", ProblemError)
    sha256 = hashlib.sha256(source.encode()).hexdigest()
    module = _execute_module(path, sha256)
    model_class = getattr(module, "Model", None)
    if not (inspect.isclass(model_class) and issubclass(model_class, nn.Module)):
        raise ProblemError(f"{path}: defines no `class Model(nn.Module)`")
    for function_name in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, function_name, None)):
            raise ProblemError(f"{path}: defines no `{function_name}()` function")
    return Problem(path, source, sha256, model_class, module.get_inputs, module.get_init_inputs)


def _execute_module(path: Path, sha256: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kernelblaster_problem_{sha256[:16]}", path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    with problem_code(path, "importing it"):
        spec.loader.exec_module(module)
    return module


# torch's default generators are process-wide (`manual_seed` reseeds the CPU's and every GPU's), and threads
# materialise problems at once: the background references while the candidate compiles, the GPU pool's workers on
# their GPUs. Unserialised, one thread's seeding lands in another's draws, and an instance made again under its
# seed (a timing set's reference, after the set was filled) no longer matches what was made first.
_SEEDING = threading.RLock()


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """torch's generators seeded with `seed` for the block, which no other thread materialising a problem
    reseeds or draws from meanwhile. Taken inside `problem_code`: a wait for it is bounded like the step."""
    with _SEEDING:
        torch.manual_seed(seed)
        yield


def make_inputs(problem: Problem, seed: int, device: torch.device | str) -> list[Any]:
    """Forward arguments under `seed` without building the model (their values differ from `instantiate`'s,
    whose model draws from the generator first): inputs to time with, at no cost in parameters."""
    with problem_code(problem.path, "get_inputs()"), _seeded(seed), torch.device(device):
        inputs = problem.get_inputs()
    return [a.to(device) if isinstance(a, torch.Tensor) else a for a in inputs]


def instantiate(problem: Problem, seed: int, device: torch.device | str) -> ProblemInstance:
    """Build the model and its inputs under `seed`, created on `device` (never staged through the CPU)."""
    with problem_code(problem.path, "building the model or its inputs"), _seeded(seed), torch.device(device):
        init_args = list(problem.get_init_inputs())
        model = problem.model_class(*init_args)
        inputs = problem.get_inputs()
    if not isinstance(inputs, list | tuple):
        raise ProblemError(f"{problem.path}: get_inputs() must return a list of forward arguments, "
                           f"got {type(inputs).__name__}")
    args = list(inputs)
    model = model.to(device)
    args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    initial_state = {name: value.detach().clone() for name, value in model.state_dict().items()}
    return ProblemInstance(problem, seed, model, init_args, args, initial_state)
