"""The facts sections of the prompts that write CUDA: the GPU, the precision contract, the targets, the
current kernel's standing, the trajectory's earlier steps, a problem's starting point and, for softmaxes,
norms, reductions and losses, the rows they reduce with the design that fits them.

The words are in `prompts/briefing.txt` (one `string.Template` per section); this module fills them in from
the run's `RunFacts` (gathered once, in `setup`), the run's settings and the trajectory's state.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Mapping, Sequence

import torch

from kernelblaster.graph.core.state import KernelRef, RunFacts, StepRecord
from kernelblaster.harness.gpu_facts import GpuFacts
from kernelblaster.harness.operations import ReducedRows
from kernelblaster.harness.precision import PrecisionPolicy, Tolerance, tolerance_for
from kernelblaster.harness.precision_facts import PrecisionFacts
from kernelblaster.harness.profile.outcome import KernelShare
from kernelblaster.harness.references import LARGE_SCALE, TINY_SCALE
from kernelblaster.kb.operations import OperationKind
from kernelblaster.kb.schema import Technique
from kernelblaster.kb.snippets import starting_points_for
from kernelblaster.nodes.prompting import prompt_file
from kernelblaster.tools.text_sections import TextSections

TEXT_FILE = "briefing.txt"
# How much of a failed step's reason and of a choice's reason the history shows.
WHY_CHARS = 200
REASON_CHARS = 160
# Rows longer than this are long: split over blocks or a cluster; at most this long, a warp takes a row.
LONG_ROW = 32 * 1024
SHORT_ROW = 1024
# Fewer rows than this many per SM leave SMs idle with one block per row.
ROWS_PER_SM = 2
# A reduction of fewer elements than this per SM is small: one block or a few do it all.
SMALL_ELEMENTS_PER_SM = 2048
ROWS_SHOWN = 4
# PyTorch kernel names are long C++ templates; the head names the operation ("...launch_clamp_scalar(").
KERNEL_NAME_CHARS = 100


@functools.cache
def briefing_text() -> TextSections:
    return TextSections.parse(TEXT_FILE, prompt_file(TEXT_FILE))


def gpu_section(facts: RunFacts | None) -> str:
    """What the GPU is and allows (the facts' source named), or that it is not known."""
    if facts is None:
        return briefing_text().fill("facts unknown")
    return _gpu_text(facts.gpu)


def _gpu_text(gpu: GpuFacts) -> str:
    text = briefing_text()
    instructions = gpu.instructions
    optin = gpu.shared_memory_per_block_optin
    abilities = gpu.capabilities
    return text.fill(
        "gpu", source=text.fill(f"source, {gpu.source.replace('_', ' ')}"), name=gpu.name,
        sm_count=str(gpu.sm_count), target=gpu.compiler.target, smem_per_sm=_bytes(gpu.shared_memory_per_sm),
        registers_per_sm=f"{gpu.registers_per_sm:,}" if gpu.registers_per_sm else None,
        threads_per_sm=f"{gpu.max_threads_per_sm:,}", smem_per_block=_bytes(gpu.shared_memory_per_block),
        smem_optin=_bytes(optin) if optin else None, l2=_bytes(gpu.l2_cache), memory=_bytes(gpu.memory),
        bandwidth=_bandwidth(gpu.bandwidth_gbs), fp32=_tflops(gpu.fp32_tflops), tf32=_tflops(gpu.tf32_tflops),
        fp16=_tflops(gpu.fp16_tflops), flags=" ".join(gpu.compiler.nvcc_flags),
        fast_math=text.fill("fast math, on" if gpu.compiler.fast_math else "fast math, off"),
        cp_async=_availability(instructions.cp_async), tma=_availability(instructions.tma),
        wgmma=_availability(instructions.wgmma),
        operands=", ".join(instructions.tensor_core_operands) or text.fill("no tensor core operands"),
        clusters=_availability(abilities.clusters) if abilities else None,
        cluster_size=str(abilities.portable_cluster_size) if abilities else None,
        cooperative=_availability(abilities.cooperative_launch) if abilities else None,
        blocks_per_sm=str(abilities.max_blocks_per_sm) if abilities and abilities.max_blocks_per_sm else None,
        toolkit=abilities.cuda_toolkit if abilities else None,
        driver=text.fill("driver", version=abilities.driver) if abilities and abilities.driver else "",
    )


def precision_section(policy: PrecisionPolicy, seeds: int, facts: RunFacts | None) -> str:
    """The precision contract: the fp32 tolerance of the policy, the special inputs, which cheaper products
    pass this problem's bounds (measured) and the pitfalls."""
    tolerance = tolerance_for(torch.float32, policy)
    return briefing_text().fill(
        "precision", policy=policy, seeds=str(seeds), bound=_bound(tolerance), large=f"{LARGE_SCALE:g}",
        tiny=f"{TINY_SCALE:g}",
        max_rel_l2=f"{tolerance.max_rel_l2:g}" if math.isfinite(tolerance.max_rel_l2) else None,
        arithmetic=arithmetic_line(facts.precision if facts else None, policy),
    )


_ARITHMETIC_NAMES = {"tf32": "TF32", "3xtf32": "3xTF32", "fp16": "fp16", "bf16": "bf16"}


def arithmetic_line(measured: PrecisionFacts | None, policy: PrecisionPolicy) -> str:
    """Which of TF32, 3xTF32, fp16 and bf16 products pass the problem's bounds under `policy`, as measured;
    or that there are no products; or why it was not measured."""
    text = briefing_text()
    if measured is None:
        return text.fill("arithmetic, not measured", reason="this run started before it was measured")
    if measured.policy != policy:
        return text.fill("arithmetic, not measured", reason=f"measured for {measured.policy}, not {policy}")
    if not measured.products:
        return text.fill("arithmetic, no products")
    if measured.reason is not None or not measured.outcomes:
        return text.fill("arithmetic, not measured", reason=measured.reason or "nothing measured")
    outcomes = "; ".join(
        text.fill("arithmetic outcome, passes" if outcome.passes else "arithmetic outcome, fails",
                  name=_ARITHMETIC_NAMES[outcome.arithmetic], rel_l2=f"{outcome.rel_l2:.1e}",
                  outside=f"{outcome.outside:,}")
        for outcome in measured.outcomes)
    return text.fill("arithmetic, measured", outcomes=outcomes)


def catalogue_section(techniques: Mapping[str, Technique], operations: Collection[OperationKind] | None,
                      policy: PrecisionPolicy) -> str:
    """The catalogue's technique names that fit the problem's operations and the policy, for a first kernel's
    `technique:` line; empty when none does."""
    names = sorted(name for name, technique in techniques.items()
                   if technique.applies_to_problem(operations)
                   and (technique.precision_policies is None or policy in technique.precision_policies))
    return briefing_text().fill("catalogue", names=", ".join(names)) if names else ""


def _bound(tolerance: Tolerance) -> str:
    terms = [(tolerance.atol, ""), (tolerance.atol_scale, " * rms(ref)"), (tolerance.rtol, " * |ref|")]
    return " + ".join(f"{value:g}{what}" for value, what in terms if value) or "0"


def targets_section(facts: RunFacts | None, initial: KernelRef | None) -> str:
    """What to beat and how far one can go: the baselines, PyTorch's kernels, the compulsory work, the
    roofline floor and the initial CUDA's time (left out before there is one). Figures that are not a GPU's
    measurements (a CPU stand-in's, a test double's) are labelled as such."""
    if facts is None:
        return ""
    text = briefing_text()
    baseline, roofline = facts.baseline, facts.roofline
    peak = (_bandwidth(roofline.peak_bandwidth_gbs) if roofline.limited_by == "memory"
            else _tflops(roofline.peak_tflops))
    if roofline.limited_by == "compute" and roofline.peak_arithmetic:
        peak = text.fill("peak arithmetic", peak=peak, arithmetic=roofline.peak_arithmetic)
    source = facts.gpu.source
    return text.fill(
        "targets", stand_in=text.fill(f"stand in, {source.replace('_', ' ')}") if source != "device" else None,
        kernels_source=text.fill("kernels source, stand in") if source != "device" else "",
        eager=_ms(baseline.eager_ms),
        compiled=_ms(baseline.compile_ms) if baseline.compile_ms is not None else "not available",
        best=_ms(baseline.best_ms), pytorch_kernels=pytorch_kernels_line(facts.pytorch_kernels),
        bytes=_bytes(roofline.compulsory_bytes), flops=_flops(roofline.flops), floor=_ms(roofline.floor_ms),
        limited_by=f"{roofline.limited_by} ({peak})",
        initial=kernel_time(initial, facts, None) if initial is not None else None,
    )


def pytorch_kernels_line(kernels: list[KernelShare] | None) -> str:
    """PyTorch's longest-running kernels with their times; a long templated name is cut visibly ("…")."""
    text = briefing_text()
    if kernels is None:
        return text.fill("pytorch kernels, not profiled")
    if not kernels:
        return text.fill("pytorch kernels, none")
    return "; ".join(text.fill("pytorch kernel", name=_one_line(kernel.name, KERNEL_NAME_CHARS),
                               time=_ms(kernel.time_ms), share=f"{100 * kernel.share:.0f}",
                               launches=str(kernel.launches))
                     for kernel in kernels)


def kernel_time(kernel: KernelRef, facts: RunFacts | None, initial: KernelRef | None) -> str:
    """A kernel's time with how it compares: against PyTorch, against the initial CUDA (when `initial` is
    another kernel) and as a share of the roofline floor's speed."""
    text = briefing_text()
    speedup = text.fill("speedup", times=f"{kernel.speedup:.2f}") if kernel.speedup is not None else ""
    vs_initial = ""
    if initial is not None and initial.sha256 != kernel.sha256:
        vs_initial = text.fill("vs initial", times=f"{initial.time_ms / kernel.time_ms:.2f}")
    roofline = ""
    if facts is not None and kernel.time_ms > 0:
        roofline = text.fill("roofline", percent=f"{100 * facts.roofline.floor_ms / kernel.time_ms:.0f}")
    return text.fill("kernel time", time=_ms(kernel.time_ms), speedup=speedup, vs_initial=vs_initial,
                     roofline=roofline)


def history_section(steps: Sequence[StepRecord]) -> str:
    """The trajectory's earlier steps, each with its technique, outcome and why (empty before the first)."""
    if not steps:
        return ""
    text = briefing_text()
    lines = [text.fill("step", number=str(number), technique=step.technique or "no code", outcome=_outcome(step),
                       reason=text.fill("step reason", reason=_one_line(step.choice_reason, REASON_CHARS))
                       if step.choice_reason else "")
             for number, step in enumerate(steps, start=1)]
    return f"\n{text.fill('history', steps=chr(10).join(lines))}\n"


def _outcome(step: StepRecord) -> str:
    text = briefing_text()
    if step.speedup is not None and step.outcome == "measured":
        kept = "step, faster" if step.speedup > 1 else "step, not faster"
        return text.fill(kept, times=f"{step.speedup:.2f}" if step.speedup > 1 else f"{1 / step.speedup:.2f}")
    return text.fill("step, failed", outcome=step.outcome, attempts=str(step.attempts),
                     why=_one_line(step.detail, WHY_CHARS))


def starting_point_section(pytorch_source: str, precision: PrecisionPolicy) -> str:
    """The verified tiled code a first kernel of a GEMM or convolution problem builds on, with the alternative
    the precision policy admits beside it and when to pick which; empty for other problems."""
    points = starting_points_for(pytorch_source, precision)
    if not points:
        return ""
    text = briefing_text()
    if len(points) == 1:
        start = points[0]
        section = text.fill("starting point", kind=start.kind, snippet=start.snippet.name,
                            technique=start.technique, source=start.snippet.source.rstrip("\n"))
    else:
        first, second = (text.fill("starting point, one of two", snippet=point.snippet.name,
                                   technique=point.technique, source=point.snippet.source.rstrip("\n"))
                         for point in points)
        section = text.fill("starting point, two", kind=points[0].kind, first=first, second=second,
                            choice=text.fill(f"choice, {points[0].kind}, {precision}"))
    return f"\n{section}\n"


def rows_section(facts: RunFacts | None) -> str:
    """How many rows the problem's softmaxes, norms, reductions and losses reduce, how long each is, and the
    design that fits (split long rows, spread few rows over the GPU, a warp per short row); empty for other
    problems and where the rows are not known."""
    if facts is None or not facts.rows:
        return ""
    text = briefing_text()
    lines = [_row_line(found, facts.gpu) for found in facts.rows[:ROWS_SHOWN]]
    if len(facts.rows) > ROWS_SHOWN:
        lines.append(text.fill("row, more", count=str(len(facts.rows) - ROWS_SHOWN)))
    return f"\n{text.fill('rows', sm_count=str(facts.gpu.sm_count), lines=chr(10).join(lines))}\n"


def _row_line(found: ReducedRows, gpu: GpuFacts) -> str:
    text = briefing_text()
    if found.contiguous:
        layout = ""
    elif found.run > 1:
        layout = text.fill("row layout, runs", runs=f"{found.length // found.run:,}", run=f"{found.run:,}")
    else:
        layout = text.fill("row layout, strided", stride=f"{found.stride:,}")
    dims = ", ".join(str(d) for d in found.dims)
    rows = f"{found.rows:,} row" if found.rows == 1 else f"{found.rows:,} rows"
    return text.fill("row", operation=found.operation, shape=", ".join(str(size) for size in found.shape),
                     dims=f"dim {dims}" if len(found.dims) == 1 else f"dims {dims}", rows=rows,
                     length=f"{found.length:,}", row_bytes=_bytes(found.length * found.element_bytes), layout=layout,
                     advice=" ".join(text.fill(advice, **fields) for advice, fields in _row_advice(found, gpu)))


def _row_advice(found: ReducedRows, gpu: GpuFacts) -> list[tuple[str, dict[str, str | None]]]:
    """The advice sections (with their fields) for one reduction's rows on this GPU."""
    sms = gpu.sm_count
    if found.rows * found.length < sms * SMALL_ELEMENTS_PER_SM:
        return [("row advice, small", {})]
    few = found.rows < ROWS_PER_SM * sms
    spread: tuple[str, dict[str, str | None]] = (
        "row advice, few rows", {"blocks": str(math.ceil(ROWS_PER_SM * sms / found.rows))})
    if found.run == 1 and found.length > 1:
        return [("row advice, strided", {}), *([spread] if few else [])]
    if few:
        return [spread]
    if found.length > LONG_ROW:
        smem = gpu.shared_memory_per_block_optin or gpu.shared_memory_per_block
        cluster = math.ceil(found.length * found.element_bytes / smem)
        abilities = gpu.capabilities
        if abilities is not None and abilities.distributed_shared_memory and cluster <= abilities.portable_cluster_size:
            return [("row advice, long rows, cluster", {"smem": _bytes(smem), "cluster": str(cluster)})]
        return [("row advice, long rows, split", {})]
    if found.length <= SHORT_ROW:
        return [("row advice, short rows", {})]
    return [("row advice, block rows", {})]


def _one_line(text: str | None, limit: int) -> str:
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _availability(available: bool) -> str:
    return briefing_text().fill("available" if available else "unavailable")


def _bandwidth(gbs: float) -> str:
    return f"{gbs:,.0f} GB/s"


def _ms(milliseconds: float) -> str:
    return f"{milliseconds:.4f} ms"


def _tflops(tflops: float) -> str:
    return f"{tflops:,.1f} TFLOP/s"


def _flops(flops: int) -> str:
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if flops >= scale:
            return f"{flops / scale:.1f} {unit}"
    return f"{flops:,} FLOP"


def _bytes(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:,} B"
