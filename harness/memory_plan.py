"""Decide, before anything is allocated, how one problem's evaluation uses GPU memory.

From the problem's sizes (inputs, params and outputs of the spec; the peak of one reference forward pass)
and the GPU's free memory, the plan fixes: how many shared argument sets rotate while timing (at least one;
more only where they fit), whether reference cases are kept for later candidates or computed one case at
a time and dropped, how many input sets the PyTorch baseline rotates over, the element count of one
comparison chunk, and whether reference cases are also computed in float64 (only where that costs no rotating
set and no caching: it needs float64 copies of the inputs, params and forward pass).
Everything else that lives on the GPU meanwhile is counted: the candidate's driver (its CUDA context, its L2
flush buffer, headroom for its workspace), the harness's null candidate's driver beside it (context and flush
buffer), and what this process sets aside in PyTorch's allocator before the candidate's driver starts
(`trusted_reserve_bytes`, taken by harness/gpu_reserve.py exactly as counted here: its own flush buffer and
one reference case computed, or checked beside a copy of the outputs and one comparison chunk's temporaries,
with the reserve's margin), and a safety share for the rest (library handles, the drivers' allocator rounding).
When even one set with one reference case cannot fit, the plan says `too_large` with the bytes needed and
available, and nothing runs. A plan is pure arithmetic: it is computed and tested without a GPU.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from kernelblaster.harness.dtypes import dtype_info
from kernelblaster.harness.references import SPECIAL_CASES, STRICT_CASES, ReferenceHolding
from kernelblaster.harness.spec import ProblemSpec, TensorSpec

GIB = 1 << 30
MIB = 1 << 20
MAX_ROTATING_SETS = 4
# The driver process's CUDA context, module and stream-ordered pool bookkeeping (about 0.5 GiB on Hopper).
DRIVER_CONTEXT_BYTES = 768 * MIB
# Room for the candidate's own workspace: a quarter of one argument set, at least 1 GiB.
WORKSPACE_SHARE = 0.25
MIN_WORKSPACE_BYTES = 1 * GIB
# cuBLAS / cuDNN workspaces of the reference forward pass, which the meta device cannot see.
LIBRARY_WORKSPACE_BYTES = 512 * MIB
# One comparison chunk holds about 32 bytes of temporaries per element (two float64 copies, masks, errors).
COMPARE_CHUNK_BYTES = 256 * MIB
COMPARE_BYTES_PER_ELEMENT = 32
# Allocator rounding and fragmentation outside the trusted reserve (the drivers' own, library handles).
SAFETY_SHARE = 0.05
# The trusted reserve (harness/gpu_reserve.py): the bytes the trusted side needs, with this margin for the
# caching allocator's rounding and splitting, in one large block; and a few blocks for PyTorch's small pool.
RESERVE_MARGIN = 1.1
RESERVE_EXTRA_BYTES = 64 * MIB
SMALL_BLOCK_BYTES = 1 * MIB  # allocations of at most 1 MiB come from PyTorch's small pool
SMALL_BLOCKS = 32
SMALL_SEGMENT_BYTES = 2 * MIB  # the small pool's segment: counted whole for each small block, at most
LARGE_ROUNDING_BYTES = 2 * MIB  # PyTorch rounds a large allocation up to a multiple of this
# Reference cases are kept for later candidates only while they take at most this share of free memory.
CACHE_SHARE = 0.25

class ProblemSizes(BaseModel):
    """The bytes a problem moves and holds, from its spec and one forward pass."""

    input_bytes: int = Field(description="Tensor inputs of the forward pass (get_inputs), bytes")
    param_bytes: int = Field(description="Parameters and buffers (state_dict), bytes")
    output_bytes: int = Field(description="Returned tensors, bytes")
    forward_peak_bytes: int = Field(description="Peak bytes one reference forward pass creates and holds at once "
                                                "(outputs and intermediates), bytes")
    float_inputs: bool = Field(description="Whether any input is floating point (then special-value cases run)")

    @property
    def set_bytes(self) -> int:
        return self.input_bytes + self.param_bytes + self.output_bytes

    @classmethod
    def of(cls, spec: ProblemSpec, forward_peak_bytes: int) -> ProblemSizes:
        return cls(input_bytes=_bytes(spec.inputs), param_bytes=_bytes(spec.params), output_bytes=_bytes(spec.outputs),
                   forward_peak_bytes=forward_peak_bytes,
                   float_inputs=any(dtype_info(t.dtype).torch_dtype.is_floating_point for t in spec.inputs))


class GpuMemory(BaseModel):
    """What the GPU offers an evaluation."""

    name: str = Field(description="The GPU's name")
    free_bytes: int = Field(description="Free device memory when the plan was made (cudaMemGetInfo, plus what "
                                        "PyTorch had cached but not used), bytes")
    l2_bytes: int = Field(description="L2 cache size; the flush buffer is twice this, bytes")


class MemoryPlan(BaseModel):
    """How an evaluation uses GPU memory, decided before anything is allocated."""

    fits: bool = Field(description="False when even one argument set with one reference case does not fit: "
                                   "the verdict is then `too_large`")
    rotating_sets: int = Field(description="Shared input/param/output sets the candidate's timing rotates over "
                                           "(verification uses the first); each holds a timing case of its own and is "
                                           "in every trusted batch; 0 when it does not fit")
    references: ReferenceHolding = Field(description="`cached`: reference cases computed once and kept for every "
                                                     "candidate; `per_case`: each case computed when checked, "
                                                     "then dropped")
    baseline_sets: int = Field(description="Input sets the PyTorch baseline rotates over")
    compare_chunk_elements: int = Field(description="Elements compared per chunk, bounding comparison temporaries")
    flush_bytes: int = Field(description="The driver's L2 flush buffer, bytes")
    workspace_headroom_bytes: int = Field(description="Room left for the candidate's own workspace, bytes")
    needed_bytes: int = Field(description="GPU memory the plan needs at its peak (for `too_large`: with one set), "
                                          "bytes")
    available_bytes: int = Field(description="GPU memory free when the plan was made, bytes")
    sizes: ProblemSizes = Field(description="The bytes the problem moves and holds")
    gpu: str = Field(description="The GPU planned for")
    float64_references: bool = Field(default=False, description="Whether reference cases are also computed in "
                                                                "float64 (candidates judged against them, within "
                                                                "bounds that follow PyTorch's own fp32 error)")
    trusted_reserve_bytes: int = Field(default=0, description="What this process sets aside in PyTorch's "
                                                              "allocator while a candidate's driver runs "
                                                              "(harness/gpu_reserve.py), counted in needed_bytes; "
                                                              "0 in plans recorded before it was counted, bytes")

    def too_large_summary(self) -> str:
        return (f"the problem needs {_gib(self.needed_bytes)} of GPU memory for one argument set "
                f"({_gib(self.sizes.set_bytes)}) with one reference case, the driver, its flush buffer and the "
                f"candidate's workspace, but {_gib(self.available_bytes)} are free on {self.gpu}")


def plan_memory(sizes: ProblemSizes, gpu: GpuMemory, seeds: int) -> MemoryPlan:
    """The plan with the most rotating sets that fit; references cached when they fit beside those sets; float64
    references when they change neither."""
    plain = _plan(sizes, gpu, seeds, float64=False)
    exact = _plan(sizes, gpu, seeds, float64=True)
    same = (exact.fits, exact.rotating_sets, exact.references) == (plain.fits, plain.rotating_sets, plain.references)
    return exact if plain.fits and same else plain


def _plan(sizes: ProblemSizes, gpu: GpuMemory, seeds: int, float64: bool) -> MemoryPlan:
    flush = 2 * gpu.l2_bytes
    workspace = max(MIN_WORKSPACE_BYTES, int(WORKSPACE_SHARE * sizes.set_bytes))
    reserve = trusted_reserve_bytes(trusted_bytes(sizes, flush, float64))
    # Two drivers: the candidate's (context, flush buffer, workspace), and the null candidate's beside it while
    # the trusted batches run (context and flush buffer); this process's reserve; the safety share.
    fixed = 2 * (DRIVER_CONTEXT_BYTES + flush) + workspace + int(SAFETY_SHARE * gpu.free_bytes)
    per_case = fixed + reserve
    sets = _sets_that_fit(sizes.set_bytes, per_case, gpu.free_bytes)
    cached_cases = _case_count(sizes, seeds) * _case_bytes(sizes)  # timing sets' arguments are built, never kept
    # Kept cases are computed before the driver starts (within what the reserve then holds) and held beside it.
    cached = fixed + cached_cases + reserve + sets * sizes.set_bytes
    caching = cached_cases <= CACHE_SHARE * gpu.free_bytes and cached <= gpu.free_bytes
    # The baseline is timed in this process while cached references are still held.
    baseline_sets = _baseline_sets(sizes, gpu.free_bytes - (cached_cases if caching else 0))
    fits = sets > 0 and baseline_sets > 0
    if not fits:
        needed = max(per_case + sizes.set_bytes, _baseline_bytes(sizes, 1) + int(SAFETY_SHARE * gpu.free_bytes))
    else:
        needed = cached if caching else per_case + sets * sizes.set_bytes
    return MemoryPlan(fits=fits, rotating_sets=sets if fits else 0,
                      references="cached" if fits and caching else "per_case",
                      baseline_sets=baseline_sets if fits else 0, compare_chunk_elements=compare_chunk_elements(),
                      flush_bytes=flush, workspace_headroom_bytes=workspace, needed_bytes=needed,
                      available_bytes=gpu.free_bytes, sizes=sizes, gpu=gpu.name, float64_references=fits and float64,
                      trusted_reserve_bytes=reserve)


def trusted_bytes(sizes: ProblemSizes, flush_bytes: int, float64: bool) -> int:
    """What this process allocates through PyTorch at most while a candidate's driver runs, whether references
    are kept or not: its own L2 flush buffer (the trusted batches), and one reference case computed or checked
    (one case at a time: every case; kept: the timing references on the changed inputs and extra verification's
    fresh seeds, which are computed then all the same; a timing set's refill from a fresh seed, its model and
    arguments built once, is smaller than computing a case and never overlaps one). The copy of the outputs the
    determinism check keeps is held only while checking, never while a case is computed (harness/verify.py keeps
    a digest after it)."""
    return flush_bytes + _per_case_reference_bytes(sizes, float64)


def trusted_reserve_large_bytes(trusted: int) -> int:
    """The large block the reserve allocates for `trusted` bytes (before PyTorch's rounding)."""
    return int(trusted * RESERVE_MARGIN) + RESERVE_EXTRA_BYTES


def trusted_reserve_bytes(trusted: int) -> int:
    """What the reserve for `trusted` bytes takes from the device: the large block as PyTorch rounds it, and
    the small-pool segments."""
    large = -(-trusted_reserve_large_bytes(trusted) // LARGE_ROUNDING_BYTES) * LARGE_ROUNDING_BYTES
    return large + SMALL_BLOCKS * SMALL_SEGMENT_BYTES


def compare_chunk_elements() -> int:
    return COMPARE_CHUNK_BYTES // COMPARE_BYTES_PER_ELEMENT


def _case_bytes(sizes: ProblemSizes) -> int:
    """A reference case held: its inputs, its params (to fill a set with) and its outputs, with a second result
    (float64 rounded; for special values the finite reference) and, for special values, reach masks (two bools
    an element: half the bytes of fp32 outputs)."""
    return sizes.set_bytes + sizes.output_bytes + sizes.output_bytes // 2


def _computing_bytes(sizes: ProblemSizes, float64: bool) -> int:
    """Computing a case beyond its inputs and params: the model's own copy of the params and one forward pass,
    beside what the case holds meanwhile (PyTorch's result and, for special values, the finite reference and the
    reach masks: the outputs three times at most). With `float64`, the float64 model, inputs and forward pass
    (twice the fp32 bytes each) and the result rounded back. Special values cost no input copy on the GPU: the
    originals are kept on the host and the inputs changed in place where the special values sit."""
    fp32 = sizes.param_bytes + sizes.forward_peak_bytes + 3 * sizes.output_bytes + LIBRARY_WORKSPACE_BYTES
    fp64 = 2 * (sizes.param_bytes + sizes.input_bytes + sizes.forward_peak_bytes) + sizes.output_bytes
    return fp32 + (fp64 if float64 else 0)


def _comparing_bytes(sizes: ProblemSizes) -> int:
    """Checking a case beyond the case itself: one expected tensor (special values; the float64 result where
    PyTorch's fp32 one differs in class) and one chunk's temporaries. The copy of the outputs the determinism
    check keeps is held while no case is (harness/verify.py): the output and a chunk, within this."""
    return sizes.output_bytes + COMPARE_CHUNK_BYTES


def per_case_reference_bytes(sizes: ProblemSizes, float64: bool) -> int:
    """One reference case computed and checked while a candidate's driver runs (harness/gpu_reserve.py)."""
    return _per_case_reference_bytes(sizes, float64)


def _per_case_reference_bytes(sizes: ProblemSizes, float64: bool) -> int:
    """One case at a time: the larger of computing it and checking against it."""
    computing = sizes.input_bytes + sizes.param_bytes + _computing_bytes(sizes, float64)
    return max(computing, _case_bytes(sizes) + _comparing_bytes(sizes))


def _case_count(sizes: ProblemSizes, seeds: int) -> int:
    return seeds + (len(SPECIAL_CASES) + len(STRICT_CASES) if sizes.float_inputs else 0)


def _sets_that_fit(set_bytes: int, other_bytes: int, free_bytes: int) -> int:
    room = free_bytes - other_bytes
    return max(0, min(MAX_ROTATING_SETS, room // max(set_bytes, 1)))


def _baseline_bytes(sizes: ProblemSizes, sets: int) -> int:
    """Timing PyTorch: the model, its initial state, `sets` input sets and one forward pass at a time."""
    return 2 * sizes.param_bytes + sets * sizes.input_bytes + sizes.forward_peak_bytes + LIBRARY_WORKSPACE_BYTES


def _baseline_sets(sizes: ProblemSizes, free_bytes: int) -> int:
    room = int((1 - SAFETY_SHARE) * free_bytes)
    fitting = [n for n in range(1, MAX_ROTATING_SETS + 1) if _baseline_bytes(sizes, n) <= room]
    return max(fitting, default=0)


def _bytes(tensors: list[TensorSpec]) -> int:
    return sum(t.numel * dtype_info(t.dtype).itemsize for t in tensors)


def _gib(nbytes: int) -> str:
    return f"{nbytes / GIB:.1f} GiB"
