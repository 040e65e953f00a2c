"""harness/memory_plan.py: how an evaluation uses GPU memory, decided from sizes alone (no GPU), and the plan
of every KernelBench problem on an H100's memory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelblaster.harness.analysis import analyse_problem
from kernelblaster.harness.gpu_reserve import (
    candidate_allowance_bytes,
    null_driver_bytes,
    reserve_block_bytes,
    trusted_session_bytes,
)
from kernelblaster.harness.memory_plan import (
    CACHE_SHARE,
    GIB,
    LARGE_ROUNDING_BYTES,
    MAX_ROTATING_SETS,
    MIB,
    SMALL_BLOCKS,
    SMALL_SEGMENT_BYTES,
    GpuMemory,
    MemoryPlan,
    ProblemSizes,
    plan_memory,
    trusted_reserve_bytes,
)
from kernelblaster.harness.problem import load_problem

REPO = Path(__file__).resolve().parents[2]
# An H100 80GB HBM3 as the harness sees it: free memory once its own CUDA context exists, and its L2.
H100 = GpuMemory(name="NVIDIA H100 80GB HBM3", free_bytes=int(79.1 * GIB), l2_bytes=50 * MIB)
# The H200 of the GPU test that found the trusted reserve uncounted (tests/gpu/test_harness_gpu.py, large_relu.py).
H200 = GpuMemory(name="NVIDIA H200", free_bytes=148_997_472_256, l2_bytes=60 * MIB)
SEEDS = 5


def sizes(inputs_gib: float, params_gib: float = 0.0, outputs_gib: float | None = None,
          forward_gib: float | None = None) -> ProblemSizes:
    outputs = inputs_gib if outputs_gib is None else outputs_gib
    return ProblemSizes(input_bytes=int(inputs_gib * GIB), param_bytes=int(params_gib * GIB),
                        output_bytes=int(outputs * GIB), forward_peak_bytes=int((forward_gib or outputs) * GIB),
                        float_inputs=True)


def reserve_taken(plan: MemoryPlan) -> int:
    """What harness/gpu_reserve.py has PyTorch take when the sets are allocated and the candidate's allowance and
    the null driver are left free: its large block as PyTorch rounds it, and the small-pool segments."""
    free = plan.available_bytes - plan.rotating_sets * plan.sizes.set_bytes
    block = reserve_block_bytes(trusted_session_bytes(plan), free, candidate_allowance_bytes(plan)
                                + null_driver_bytes(plan))
    return -(-block // LARGE_ROUNDING_BYTES) * LARGE_ROUNDING_BYTES + SMALL_BLOCKS * SMALL_SEGMENT_BYTES


def test_a_small_problem_rotates_the_most_sets_and_keeps_its_references() -> None:
    plan = plan_memory(sizes(0.01), H100, SEEDS)
    assert plan.fits
    assert (plan.rotating_sets, plan.references, plan.baseline_sets) == (MAX_ROTATING_SETS, "cached",
                                                                        MAX_ROTATING_SETS)
    assert plan.needed_bytes <= plan.available_bytes


@pytest.mark.parametrize(("spare", "holding"), [(0, "cached"), (-4, "per_case")])
def test_kept_references_are_the_seeds_and_every_special_case(spare: int, holding: str) -> None:
    # 0.175 GiB a case (inputs, outputs, the float64 result and reach masks): 5 seeds and 8 special cases are kept
    # while they take at most a quarter of free memory; timing sets' arguments are built and never kept.
    problem = sizes(0.05)
    case = problem.set_bytes + problem.output_bytes * 3 // 2
    gpu = GpuMemory(name="small", free_bytes=4 * (SEEDS + 8) * case + spare, l2_bytes=50 * MIB)
    plan = plan_memory(problem, gpu, SEEDS)
    assert plan.rotating_sets == MAX_ROTATING_SETS and plan.references == holding


def test_references_too_large_to_keep_are_computed_one_case_at_a_time() -> None:
    # 9 cases of 3 GiB each exceed a quarter of the free memory.
    plan = plan_memory(sizes(1.5), H100, SEEDS)
    assert CACHE_SHARE * H100.free_bytes < 9 * 3 * GIB
    assert plan.fits and plan.references == "per_case"


def test_a_16_gib_problem_gets_the_most_sets_that_fit_and_no_more() -> None:
    # KernelBench level1/45_Average_Pooling_2D: 16 GiB in, 0.13 GiB out.
    problem = sizes(16.0, outputs_gib=0.13)
    plan = plan_memory(problem, H100, SEEDS)
    assert plan.fits and plan.references == "per_case"
    assert 1 <= plan.rotating_sets < MAX_ROTATING_SETS
    assert plan.needed_bytes <= H100.free_bytes < plan.needed_bytes + problem.set_bytes


def test_every_set_and_every_other_allocation_is_counted_in_the_peak() -> None:
    problem = sizes(8.0)  # KernelBench level1/39_L2Norm_: 8 GiB in, 8 GiB out
    plan = plan_memory(problem, H100, SEEDS)
    others = plan.flush_bytes + plan.workspace_headroom_bytes + problem.output_bytes
    assert plan.needed_bytes >= plan.rotating_sets * problem.set_bytes + problem.set_bytes + others


@pytest.mark.parametrize("gpu", [H100, H200], ids=["h100", "h200"])
@pytest.mark.parametrize("problem", [sizes(0.01), sizes(1.5), sizes(6.0), sizes(8.0), sizes(16.0, outputs_gib=0.13),
                                     sizes(0.5, params_gib=2.0, forward_gib=4.0)],
                         ids=["tiny", "1.5gib", "6gib", "8gib", "16gib-in", "params"])
def test_the_peak_counts_the_sets_both_drivers_and_the_trusted_reserve(problem: ProblemSizes, gpu: GpuMemory) -> None:
    plan = plan_memory(problem, gpu, SEEDS)
    assert plan.fits
    beside = candidate_allowance_bytes(plan) + null_driver_bytes(plan) + plan.rotating_sets * problem.set_bytes
    assert plan.needed_bytes >= beside + reserve_taken(plan)
    assert plan.needed_bytes <= plan.available_bytes


def test_the_plan_reports_the_reserve_the_trusted_side_takes_with_its_margin() -> None:
    plan = plan_memory(sizes(6.0), H200, SEEDS)
    assert plan.trusted_reserve_bytes == reserve_taken(plan) == trusted_reserve_bytes(trusted_session_bytes(plan))
    assert plan.trusted_reserve_bytes >= 1.1 * trusted_session_bytes(plan)


def test_kept_references_are_counted_beside_the_trusted_reserve() -> None:
    plan = plan_memory(sizes(0.01), H100, SEEDS)
    assert plan.references == "cached"
    cases = (SEEDS + 8) * (plan.sizes.set_bytes + plan.sizes.output_bytes * 3 // 2)
    assert plan.needed_bytes >= cases + reserve_taken(plan) + plan.rotating_sets * plan.sizes.set_bytes


def test_the_six_gib_problem_on_an_h200_holds_its_pytorch_peak_within_the_plan() -> None:
    # The GPU test saw this process's PyTorch peak (the reserve) at 78,645,297,152 bytes against a bound of
    # needed_bytes less the sets, 77,368,921,292: the plan had not counted the reserve's margin nor the copy of
    # the outputs it set aside. The bound now holds the reserve, and the plan still keeps 4 sets and float64.
    plan = plan_memory(sizes(6.0), H200, SEEDS)
    assert (plan.fits, plan.rotating_sets, plan.references, plan.float64_references) == (True, 4, "per_case", True)
    assert reserve_taken(plan) <= plan.needed_bytes - plan.rotating_sets * plan.sizes.set_bytes


def test_a_problem_whose_reserve_cannot_fit_beside_one_set_is_too_large() -> None:
    # 20 GiB in and out: one set (40 GiB) fits an H100, but not with a reference case set aside beside it.
    plan = plan_memory(sizes(20.0), H100, SEEDS)
    assert plan.sizes.set_bytes < H100.free_bytes
    assert not plan.fits
    assert plan.needed_bytes >= plan.sizes.set_bytes + plan.trusted_reserve_bytes > plan.available_bytes


def test_a_problem_that_cannot_fit_one_set_is_too_large_before_anything_runs() -> None:
    plan = plan_memory(sizes(40.0), H100, SEEDS)
    assert not plan.fits
    assert (plan.rotating_sets, plan.baseline_sets) == (0, 0)
    assert plan.needed_bytes > plan.available_bytes
    summary = plan.too_large_summary()
    assert f"{plan.needed_bytes / GIB:.1f} GiB" in summary and "79.1 GiB are free on NVIDIA H100" in summary


def test_a_problem_whose_baseline_cannot_fit_is_too_large() -> None:
    # Inputs fit once beside the driver, but the model's parameters twice over (model and its state) do not.
    plan = plan_memory(sizes(0.01, params_gib=38.0, outputs_gib=0.01), H100, SEEDS)
    assert not plan.fits


def test_the_flush_buffer_is_twice_the_l2_cache() -> None:
    assert plan_memory(sizes(0.01), H100, SEEDS).flush_bytes == 100 * MIB


def test_comparison_chunks_are_bounded_whatever_the_problem() -> None:
    small, large = plan_memory(sizes(0.01), H100, SEEDS), plan_memory(sizes(8.0), H100, SEEDS)
    assert small.compare_chunk_elements == large.compare_chunk_elements <= 16 * 1 << 20


def test_the_plan_round_trips_through_json() -> None:
    plan = plan_memory(sizes(8.0), H100, SEEDS)
    assert MemoryPlan.model_validate_json(plan.model_dump_json()) == plan


# ---- every KernelBench problem -------------------------------------------------------------------------------


def kernelbench_dir() -> Path | None:
    """$KERNELBENCH_DIR, else a copy in the repository's .kernelbench/, else ../shared/kernelbench beside it."""
    candidates = [os.environ.get("KERNELBENCH_DIR"), REPO / ".kernelbench", REPO.parent / "shared" / "kernelbench"]
    return next((Path(c) for c in candidates if c and (Path(c) / "level1").is_dir()), None)


def kernelbench_problems() -> list[Path]:
    root = kernelbench_dir()
    if root is None:
        return []
    return sorted(path for level in ("level1", "level2", "level3") for path in (root / level).glob("*.py"))


@pytest.mark.skipif(kernelbench_dir() is None, reason="no KernelBench copy (set KERNELBENCH_DIR)")
@pytest.mark.parametrize("path", kernelbench_problems(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_kernelbench_problem_gets_a_plan_on_an_h100(path: Path) -> None:
    analysis = analyse_problem(load_problem(path), gpu=None)
    plan = plan_memory(ProblemSizes.of(analysis.spec, analysis.footprint.peak_bytes), H100, SEEDS)
    assert plan.fits, plan.too_large_summary()
    assert plan.needed_bytes <= plan.available_bytes
    assert plan.rotating_sets >= 1 and plan.baseline_sets >= 1


def test_a_small_problem_gets_float64_references() -> None:
    assert plan_memory(sizes(0.01), H100, SEEDS).float64_references


def test_float64_references_are_dropped_where_they_would_cost_a_rotating_set() -> None:
    # A 6 GiB elementwise problem (KernelBench level1/19_ReLU's size): float64 copies would crowd out sets.
    problem = sizes(6.0)
    plan = plan_memory(problem, H100, SEEDS)
    assert plan.fits and not plan.float64_references
    assert plan.rotating_sets > 1
