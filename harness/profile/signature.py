"""The performance-state signature: a fixed-length vector of profile-derived fractions that the knowledge
base indexes (by cosine distance) to find the nearest known performance state.

Every field is a fraction in [0, 1] (percentages / 100, clipped). Over several kernels a field is the
duration-weighted mean of the per-kernel values, so the kernels that take the time shape the state.

Missing metrics (a section not collected, "no data", an older ncu) never fail: the field takes 0.0,
meaning "no evidence of this", except the stall mix, whose unexplained remainder goes to `stall_other`
so the stall shares always sum to 1. A kernel without a duration is weighted like the mean known one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kernelblaster.harness.profile.report import KernelProfile, NcuReport
from kernelblaster.kb.signature_fields import SIGNATURE_FIELDS  # the KB owns the layout of the vectors it indexes

MISSING_VALUE = 0.0
MAX_REGISTERS_PER_THREAD = 255
# log2(1 + kernels) / 8 reaches 1 at 255 launches; beyond that the count no longer tells states apart.
LAUNCH_COUNT_LOG2_SCALE = 8.0

# Signature field -> ncu warp-state name (after "Stall "); every other stall reason counts as other.
STALL_NAMES: dict[str, str] = {
    "stall_long_scoreboard": "Long Scoreboard",
    "stall_short_scoreboard": "Short Scoreboard",
    "stall_barrier": "Barrier",
    "stall_mio_throttle": "MIO Throttle",
    "stall_lg_throttle": "LG Throttle",
    "stall_math_pipe_throttle": "Math Pipe Throttle",
    "stall_wait": "Wait",
    "stall_not_selected": "Not Selected",
}

# Signature field -> pipe name family: a pipe belongs if its name is the family or starts with it and a
# space ("FMA (FP16)" is an FMA pipe, "Tensor (FP)" a tensor pipe); the field is the family's maximum.
PIPE_FAMILIES: dict[str, str] = {
    "pipe_fma": "FMA",
    "pipe_alu": "ALU",
    "pipe_lsu": "LSU",
    "pipe_tensor": "Tensor",
}

# Below this throughput (fraction of peak) on both SM and memory, ncu itself calls a kernel latency-bound.
BOUND_THRESHOLD = 0.6


def signature_from_report(report: NcuReport) -> list[float]:
    """The signature of all kernels in `report`, in SIGNATURE_FIELDS order."""
    features = _weighted_mean([kernel_features(k) for k in report.kernels], _duration_weights(report.kernels))
    features["launch_count"] = _clip(math.log2(1 + report.kernel_count) / LAUNCH_COUNT_LOG2_SCALE)
    return [features[field] for field in SIGNATURE_FIELDS]


def kernel_features(kernel: KernelProfile) -> dict[str, float]:
    """One kernel's signature fields, without launch_count (a property of the whole report)."""
    features = {
        "sm_throughput": _fraction(kernel.sm_throughput_pct),
        "memory_throughput": _fraction(kernel.memory_throughput_pct),
        "dram_throughput": _fraction(kernel.dram_throughput_pct),
        "l1_hit_rate": _fraction(kernel.l1_hit_rate_pct),
        "l2_hit_rate": _fraction(kernel.l2_hit_rate_pct),
        "achieved_occupancy": _fraction(kernel.achieved_occupancy_pct),
        "theoretical_occupancy": _fraction(kernel.theoretical_occupancy_pct),
        "registers_per_thread": _clip((kernel.registers_per_thread or 0) / MAX_REGISTERS_PER_THREAD),
        "issue_active": _fraction(kernel.eligible_cycles_pct),
        "local_spill": _fraction(kernel.local_spill_overhead_pct),
    }
    return features | _stall_shares(kernel) | _pipe_fractions(kernel)


def _stall_shares(kernel: KernelProfile) -> dict[str, float]:
    stalls = kernel.stall_reasons()
    total = sum(stall.cycles for stall in stalls)
    if total <= 0:
        return {field: MISSING_VALUE for field in STALL_NAMES} | {"stall_other": 1.0}
    by_name = {stall.name: stall.cycles for stall in stalls}
    shares = {field: by_name.get(name, 0.0) / total for field, name in STALL_NAMES.items()}
    # The named shares are computed from the same total, so the remainder is the unnamed reasons' share.
    shares["stall_other"] = _clip(1.0 - sum(shares.values()))
    return shares


def _pipe_fractions(kernel: KernelProfile) -> dict[str, float]:
    pipes = kernel.pipe_utilization()
    return {
        field: _fraction(max((p.percent for p in pipes if p.name == family or p.name.startswith(family + " ")),
                             default=None))
        for field, family in PIPE_FAMILIES.items()
    }


def _duration_weights(kernels: Sequence[KernelProfile]) -> list[float]:
    durations = [kernel.duration_ns for kernel in kernels]
    known = [d for d in durations if d is not None and d > 0]
    fallback = sum(known) / len(known) if known else 1.0
    filled = [d if d is not None and d > 0 else fallback for d in durations]
    total = sum(filled)
    return [d / total for d in filled]


def _weighted_mean(per_kernel: list[dict[str, float]], weights: list[float]) -> dict[str, float]:
    if not per_kernel:
        return {field: MISSING_VALUE for field in SIGNATURE_FIELDS} | {"stall_other": 1.0}
    return {field: _clip(sum(w * features[field] for w, features in zip(weights, per_kernel, strict=True)))
            for field in per_kernel[0]}


def _fraction(percent: float | None) -> float:
    return MISSING_VALUE if percent is None or math.isnan(percent) else _clip(percent / 100.0)


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


def describe_signature(vector: Sequence[float]) -> str:
    """One line naming the bottleneck and the numbers behind it, e.g.
    "memory-bound: DRAM 91%, SM 23%, occupancy 70% of 100%, top stall long scoreboard 64%"."""
    if len(vector) != len(SIGNATURE_FIELDS):
        raise ValueError(f"a signature has {len(SIGNATURE_FIELDS)} values, got {len(vector)}")
    values = dict(zip(SIGNATURE_FIELDS, vector, strict=True))
    parts = [
        f"DRAM {values['dram_throughput']:.0%}",
        f"memory {values['memory_throughput']:.0%}",
        f"SM {values['sm_throughput']:.0%}",
        f"occupancy {values['achieved_occupancy']:.0%} of {values['theoretical_occupancy']:.0%}",
        _top_stall(values),
    ]
    if values["pipe_tensor"] >= 0.05:
        parts.append(f"tensor pipe {values['pipe_tensor']:.0%}")
    if values["local_spill"] >= 0.05:
        parts.append(f"local spill {values['local_spill']:.0%}")
    parts.append(f"{_kernel_count(values['launch_count'])} kernel(s)")
    return f"{_bottleneck(values)}: " + ", ".join(parts)


def _bottleneck(values: dict[str, float]) -> str:
    memory, compute = values["memory_throughput"], values["sm_throughput"]
    leaning = "memory" if memory >= compute else "compute"
    if max(memory, compute) < BOUND_THRESHOLD:
        return f"latency-bound ({leaning}-leaning)"
    if min(memory, compute) >= BOUND_THRESHOLD:
        return "compute- and memory-bound"
    return f"{leaning}-bound"


def _top_stall(values: dict[str, float]) -> str:
    field = max((*STALL_NAMES, "stall_other"), key=lambda name: values[name])
    name = STALL_NAMES.get(field, "other").lower()
    return f"top stall {name} {values[field]:.0%}"


def _kernel_count(launch_count: float) -> str:
    if launch_count >= 1.0:
        return f"{2 ** LAUNCH_COUNT_LOG2_SCALE - 1:.0f}+"
    return f"{round(2 ** (launch_count * LAUNCH_COUNT_LOG2_SCALE) - 1)}"
