"""GPU memory the trusted process needs while a candidate's driver runs, set aside before the driver starts,
and the blame for running out of it.

While a candidate's process lives, the trusted process still allocates: its L2 flush buffer, the copy of the
outputs kept for the determinism check, each comparison chunk's temporaries and whole reference cases (every
case when they are computed one at a time; the timing references and extra verification's fresh seeds in any
case). A candidate that takes all free device memory would make
those allocations fail, and the evaluation would end as the harness's failure instead of a verdict on the
candidate. So `reserved_for_trusted` has PyTorch's caching allocator take what the memory plan counts for
the trusted side (`trusted_session_bytes`) before the driver starts, and free it into its own cache: later
allocations of this process are served from there, and device memory the candidate takes is memory the
trusted side no longer needs.

Should the trusted side run out all the same (a plan too tight, memory outside the allocator such as a
library's first handle), `noting_out_of_memory` records the device's free memory at that moment; once the
driver has ended, what its process gave back is what it held (`freed_since`). More than the plan allows it
(CUDA context, L2 flush buffer, workspace headroom) is the candidate's doing: a failed `runs` check
(`hoarding_check`); otherwise the failure stays the harness's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from kernelblaster.harness.memory_plan import (
    DRIVER_CONTEXT_BYTES,
    GIB,
    SMALL_BLOCK_BYTES,
    SMALL_BLOCKS,
    SMALL_SEGMENT_BYTES,
    MemoryPlan,
    trusted_bytes,
    trusted_reserve_large_bytes,
)
from kernelblaster.harness.result import CheckResult

# How long a driver's process may take to give its memory back once it has ended.
RELEASE_WAIT_S = 3.0
RELEASE_POLL_S = 0.1


class TrustedOutOfMemory(Exception):
    """The trusted process ran out of GPU memory while a candidate's driver was running."""

    def __init__(self, error: BaseException, free_bytes: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.free_bytes = free_bytes


def trusted_session_bytes(plan: MemoryPlan) -> int:
    """What the trusted process allocates at most while a driver runs, as the plan counts it
    (`memory_plan.trusted_bytes`: its flush buffer and one reference case computed or checked)."""
    return trusted_bytes(plan.sizes, plan.flush_bytes, plan.float64_references)


def candidate_allowance_bytes(plan: MemoryPlan) -> int:
    """The device memory a candidate's process may hold by the plan: its CUDA context, the L2 flush buffer
    and the workspace headroom."""
    return DRIVER_CONTEXT_BYTES + plan.flush_bytes + plan.workspace_headroom_bytes


def null_driver_bytes(plan: MemoryPlan) -> int:
    """The device memory the harness's null candidate's driver holds beside the candidate's (while the trusted
    batches run): its CUDA context and its L2 flush buffer."""
    return DRIVER_CONTEXT_BYTES + plan.flush_bytes


def reserve_block_bytes(nbytes: int, free_bytes: int, leave_bytes: int) -> int:
    """The large block the reserve for `nbytes` allocates when `free_bytes` are free: the plan's
    (`memory_plan.trusted_reserve_large_bytes`), as far as it leaves `leave_bytes` and the small-pool segments."""
    room = free_bytes - leave_bytes - SMALL_BLOCKS * SMALL_SEGMENT_BYTES
    return max(0, min(trusted_reserve_large_bytes(nbytes), room))


@contextmanager
def reserved_for_trusted(gpu: int, nbytes: int, leave_bytes: int) -> Iterator[None]:
    """Within the block, `nbytes` (with margin) and a few small-pool segments sit in PyTorch's cache for this
    process, as far as that leaves `leave_bytes` free (the candidate's allowance); they go back to the device
    after it. The memory plan counts exactly this (`memory_plan.trusted_reserve_bytes`)."""
    device = f"cuda:{gpu}"
    # cuBLAS's workspace, kept as long as its handle, is allocated through PyTorch's allocator: taken now, it
    # is not carved out of the reserve, which can then go back to the device whole.
    torch.cuda.current_blas_handle()
    torch.cuda.empty_cache()  # blocks cached before (the GPU's peaks measured, say) are not the reserve's
    free = torch.cuda.mem_get_info(gpu)[0]
    small = [torch.empty(SMALL_BLOCK_BYTES, dtype=torch.uint8, device=device) for _ in range(SMALL_BLOCKS)]
    large = torch.empty(reserve_block_bytes(nbytes, free, leave_bytes), dtype=torch.uint8, device=device)
    del large, small  # freed into the allocator's cache, which keeps them for this process
    try:
        yield
    finally:
        torch.cuda.empty_cache()


@contextmanager
def noting_out_of_memory(gpu: int) -> Iterator[None]:
    """Turns the trusted side's out-of-memory in the block into TrustedOutOfMemory with the free memory then."""
    try:
        yield
    except RuntimeError as error:
        if not is_out_of_memory(error):
            raise
        raise TrustedOutOfMemory(error, torch.cuda.mem_get_info(gpu)[0]) from error


# How CUDA libraries report an allocation they could not make (cuDNN and cuBLAS also fail to initialise
# without memory). Taking another failure for one blames no one wrongly: the blame follows the memory the
# candidate's process held (`hoarding_check`), never the message.
_OUT_OF_MEMORY_WORDS = ("out of memory", "ALLOC_FAILED", "CUDNN_STATUS_NOT_INITIALIZED",
                        "CUBLAS_STATUS_NOT_INITIALIZED")


def is_out_of_memory(error: BaseException) -> bool:
    """PyTorch's own out-of-memory, or a CUDA library's allocation failure reported as a RuntimeError."""
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return True
    return any(word in str(error) for word in _OUT_OF_MEMORY_WORDS)


def freed_since(gpu: int, free_bytes: int) -> int:
    """Device memory given back since the device had `free_bytes` free (waiting a little for an ended
    process's memory to come back)."""
    deadline = time.monotonic() + RELEASE_WAIT_S
    freed = torch.cuda.mem_get_info(gpu)[0] - free_bytes
    while time.monotonic() < deadline:
        time.sleep(RELEASE_POLL_S)
        now = torch.cuda.mem_get_info(gpu)[0] - free_bytes
        if now <= freed:
            break
        freed = now
    return max(0, freed)


def hoarding_check(held_bytes: int, plan: MemoryPlan) -> CheckResult | None:
    """The failed check for a candidate whose process held more device memory than the plan allows it,
    when the trusted side ran out; None when it held no more (then the failure is the harness's)."""
    allowed = candidate_allowance_bytes(plan)
    if held_bytes <= allowed:
        return None
    return CheckResult(name="runs", passed=False, detail=(
        f"the candidate's process held {held_bytes / GIB:.1f} GiB of GPU memory while the harness checked it, "
        f"more than the {allowed / GIB:.1f} GiB it may use (its CUDA context, the L2 flush buffer and "
        f"{plan.workspace_headroom_bytes / GIB:.1f} GiB of workspace), so its outputs could not be checked: "
        "allocate less, and free what kb_forward allocates"))
