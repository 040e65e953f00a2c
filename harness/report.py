"""Render an EvalResult or a baseline as a short report a GPU engineer reads at a glance."""

from __future__ import annotations

from kernelblaster.harness.memory_plan import GIB, MemoryPlan
from kernelblaster.harness.profile.outcome import ProfileOutcome, ProfileReport
from kernelblaster.harness.result import BaselineTiming, EvalResult, Roofline


def render_eval(result: EvalResult, profile_requested: bool = False) -> str:
    lines = [
        f"verdict: {result.verdict} - {result.summary}",
        f"problem: {result.problem}   candidate: {result.candidate} (sha256 {result.source_sha256[:12]})",
        f"gpu: {result.gpu or 'none'} ({result.arch})   precision: {result.precision}",
    ]
    if result.machine:
        lines.append(f"machine: {result.machine.line()}")
    if result.memory and result.memory.fits:
        lines.append(render_memory(result.memory))
    if result.failure:
        lines.append(f"harness failure in stage {result.failure.stage}: {result.failure.error} "
                     "(traceback in --json's `failure`)")
    if result.compile and result.compile.resources:
        lines.append("resources: " + "; ".join(result.compile.resources))
    if result.checks:
        lines.append("checks:")
        width = max(len(c.name) for c in result.checks)
        lines += [f"  {'PASS' if c.passed else 'FAIL'} {c.name:<{width}}  {c.detail}" for c in result.checks]
    if result.weakly_checked:
        lines.append("note: the reference output is near-zero or constant, so correctness is only weakly checked")
    if result.timing:
        lines.append(f"time: {result.timing.event.describe()}, {result.timing.rotating_sets} rotating input sets, "
                     "L2 flushed and persisting lines reset before each call")
        trusted = result.timing.trusted
        if trusted is not None:
            lines.append(f"harness's clock: {trusted.per_call_ms * 1000:.1f} us per call in back-to-back batches "
                         f"({trusted.checked_batches} of {trusted.batches} batches checked; the median may lie "
                         f"{trusted.tolerance_ms * 1000:.1f} us below it)")
    if result.baseline:
        lines += render_baseline_lines(result.baseline)
    if result.speedup:
        compile_text = f"{result.speedup.vs_compile:.2f}x" if result.speedup.vs_compile else "n/a"
        lines.append(f"speedup: {result.speedup.vs_best:.2f}x vs the faster baseline "
                     f"({result.speedup.vs_eager:.2f}x vs eager, {compile_text} vs torch.compile)")
    if result.roofline:
        lines.append(render_roofline(result.roofline))
    lines += render_profile_lines(result.profile, profile_requested)
    stages = result.stages.ran()
    if stages:
        lines.append("seconds: " + ", ".join(f"{stage} {seconds:.3f}" for stage, seconds in stages.items()))
    if result.verdict == "compile_error" and result.compile_log:
        lines += ["compiler output:", result.compile_log.strip()]
    return "\n".join(lines)


def render_memory(plan: MemoryPlan) -> str:
    held = "kept for every candidate" if plan.references == "cached" else "computed one case at a time"
    return (f"memory: {plan.rotating_sets} argument sets of {plan.sizes.set_bytes / GIB:.2f} GiB, references "
            f"{held}; planned peak {plan.needed_bytes / GIB:.1f} of {plan.available_bytes / GIB:.1f} GiB free")


def render_baseline_lines(baseline: BaselineTiming) -> list[str]:
    lines = [f"pytorch eager: {baseline.eager.describe()}"]
    if baseline.compiled:
        lines.append(f"torch.compile: {baseline.compiled.describe()}")
    elif baseline.compile_error:
        lines.append(f"torch.compile: failed ({baseline.compile_error})")
    return lines


def render_roofline(roofline: Roofline) -> str:
    text = (f"roofline: {roofline.compulsory_bytes / 1e6:.1f} MB, {roofline.flops / 1e9:.2f} GFLOP; "
            f"floor {roofline.floor_ms * 1000:.1f} us ({roofline.limited_by}-bound at "
            f"{roofline.peak_bandwidth_gbs:.0f} GB/s, {roofline.peak_tflops:.1f} TFLOP/s measured)")
    if roofline.fraction_of_floor is not None:
        text += f"; candidate at {roofline.fraction_of_floor * 100:.0f}% of the floor"
    return text


def render_profile_lines(profile: ProfileOutcome | None, requested: bool) -> list[str]:
    if profile is None and requested:
        return ["profile: not taken (only a candidate that passes every check is profiled)"]
    if profile is None:
        return ["profile: not requested (--profile)"]
    if not isinstance(profile, ProfileReport):
        return [f"profile: unavailable ({profile.reason})"]
    return [f"profile: {profile.kernel_count} kernels, {profile.total_gpu_time_ns / 1000:.1f} us GPU time, "
            f"{profile.total_elapsed_cycles:,.0f} cycles; {profile.signature_summary}", profile.findings]
