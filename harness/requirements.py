"""What evaluating candidates needs from this machine, checked before a run writes anything: a visible
NVIDIA GPU for every index asked for, nvcc, ncu when kernels are to be profiled, compute-sanitizer when they
are to be sanitized, and the OS sandbox unless the user runs candidates unconfined."""

from __future__ import annotations

from collections.abc import Sequence

from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.ncu import locate_ncu
from kernelblaster.tools.nvcc import find_nvcc
from kernelblaster.tools.sandbox import UNSAFE_FLAG, probe_sandbox
from kernelblaster.tools.sanitizer import locate_sanitizer
from kernelblaster.tools.toolkit import ToolUnavailable


def visible_gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def missing_for_run(gpus: Sequence[int], profile: bool, unsafe_no_sandbox: bool, sanitize: bool) -> list[str]:
    """What this machine lacks to evaluate candidates on `gpus` (and profile them if `profile`, run them under
    compute-sanitizer if `sanitize`), in the OS sandbox unless `unsafe_no_sandbox`; empty if nothing. What a
    setting would spare is said of a run started with it, as `resume` and `answer` cannot change a run's
    settings."""
    missing = []
    count = visible_gpu_count()
    if count == 0:
        missing.append("an NVIDIA GPU (no CUDA GPU is visible)")
    else:
        missing += [f"GPU {gpu} (only {_visible(count)} visible)" for gpu in gpus if gpu >= count]
    try:
        find_nvcc()
    except UserFacingError as error:
        missing.append(str(error))
    located = locate_ncu() if profile else None
    if isinstance(located, ToolUnavailable):
        missing.append(f"{located.reason}; a run started with --no-profile (in Studio: profile off) needs no ncu")
    sanitizer = locate_sanitizer() if sanitize else None
    if isinstance(sanitizer, ToolUnavailable):
        missing.append(f"{sanitizer.reason}, for --sanitize")
    sandbox = None if unsafe_no_sandbox else probe_sandbox()
    if isinstance(sandbox, str):
        missing.append(f"the OS sandbox ({sandbox}); a run started with {UNSAFE_FLAG} (in Studio: "
                       "unsafe_no_sandbox on) runs candidates unconfined")
    return missing


def check_gpu_index(gpu: int) -> None:
    """A one-line error if GPUs are visible but `gpu` is not one of them."""
    count = visible_gpu_count()
    if 0 < count <= gpu:
        raise UserFacingError(f"--gpu {gpu}: no such GPU (only {_visible(count)} visible)")


def _visible(count: int) -> str:
    return "GPU 0 is" if count == 1 else f"GPUs 0..{count - 1} are"
