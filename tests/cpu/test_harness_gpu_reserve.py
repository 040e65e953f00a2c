"""harness/gpu_reserve.py without a GPU: how much the trusted side sets aside before a candidate's driver
starts, and whom an out-of-memory is blamed on (the reserve itself and the blame on a GPU:
tests/hostile/test_hostile_gpu.py)."""

from __future__ import annotations

import torch

from kernelblaster.harness.gpu_reserve import (
    candidate_allowance_bytes,
    hoarding_check,
    is_out_of_memory,
    null_driver_bytes,
    reserve_block_bytes,
    trusted_session_bytes,
)
from kernelblaster.harness.memory_plan import (
    DRIVER_CONTEXT_BYTES,
    GIB,
    LARGE_ROUNDING_BYTES,
    MIB,
    SMALL_BLOCKS,
    SMALL_SEGMENT_BYTES,
    GpuMemory,
    ProblemSizes,
    per_case_reference_bytes,
    plan_memory,
)

H100 = GpuMemory(name="NVIDIA H100 80GB HBM3", free_bytes=int(79.1 * GIB), l2_bytes=50 * MIB)


def sizes(gib: float) -> ProblemSizes:
    nbytes = int(gib * GIB)
    return ProblemSizes(input_bytes=nbytes, param_bytes=0, output_bytes=nbytes, forward_peak_bytes=nbytes,
                        float_inputs=True)


def test_with_references_kept_the_trusted_side_sets_aside_its_flush_buffer_and_a_case_computed_meanwhile() -> None:
    # Kept references are not recomputed, but the timing references (on the changed inputs) are, while the
    # candidate's driver runs.
    plan = plan_memory(sizes(0.01), H100, 5)
    assert plan.references == "cached"
    assert trusted_session_bytes(plan) == plan.flush_bytes + per_case_reference_bytes(plan.sizes,
                                                                                      plan.float64_references)


def test_with_references_computed_per_case_it_sets_aside_the_same() -> None:
    plan = plan_memory(sizes(1.5), H100, 5)
    assert plan.references == "per_case"
    assert trusted_session_bytes(plan) == plan.flush_bytes + per_case_reference_bytes(plan.sizes,
                                                                                      plan.float64_references)


def test_the_reserve_takes_what_the_plan_counts_for_it() -> None:
    plan = plan_memory(sizes(6.0), H100, 5)
    block = reserve_block_bytes(trusted_session_bytes(plan), H100.free_bytes, 0)
    rounded = -(-block // LARGE_ROUNDING_BYTES) * LARGE_ROUNDING_BYTES
    assert rounded + SMALL_BLOCKS * SMALL_SEGMENT_BYTES == plan.trusted_reserve_bytes


def test_the_reserve_leaves_the_candidate_its_allowance() -> None:
    plan = plan_memory(sizes(6.0), H100, 5)
    free = plan.trusted_reserve_bytes  # less than the reserve wants once the allowance is left
    leave = candidate_allowance_bytes(plan) + null_driver_bytes(plan)
    block = reserve_block_bytes(trusted_session_bytes(plan), free, leave)
    assert block + SMALL_BLOCKS * SMALL_SEGMENT_BYTES + leave == free


def test_the_null_candidates_driver_holds_its_context_and_flush_buffer() -> None:
    plan = plan_memory(sizes(0.01), H100, 5)
    assert null_driver_bytes(plan) == DRIVER_CONTEXT_BYTES + plan.flush_bytes


def test_a_candidate_that_held_more_than_its_allowance_fails_the_runs_check_saying_how_much() -> None:
    plan = plan_memory(sizes(0.01), H100, 5)
    assert candidate_allowance_bytes(plan) == DRIVER_CONTEXT_BYTES + 100 * MIB + plan.workspace_headroom_bytes
    check = hoarding_check(70 * GIB, plan)
    assert check is not None and (check.name, check.passed) == ("runs", False)
    assert check.detail.startswith("the candidate's process held 70.0 GiB of GPU memory while the harness checked "
                                   "it, more than the 1.8 GiB it may use")


def test_a_candidate_within_its_allowance_is_not_blamed_for_the_harness_running_out() -> None:
    plan = plan_memory(sizes(0.01), H100, 5)
    assert hoarding_check(candidate_allowance_bytes(plan), plan) is None


def test_out_of_memory_is_recognised_from_pytorch_and_from_cuda_libraries() -> None:
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert not is_out_of_memory(RuntimeError("CUDA error: an illegal memory access was encountered"))
