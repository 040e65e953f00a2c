"""The fixed layout of a performance-state signature: 24 profile-derived numbers, each roughly in [0, 1].

The harness computes signatures in exactly this order (harness/profile/signature.py); the KB stores the layout
beside its states so that a KB built with another layout is refused instead of silently mis-matched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SIGNATURE_FIELDS: tuple[str, ...] = (
    "sm_throughput",
    "memory_throughput",
    "dram_throughput",
    "l1_hit_rate",
    "l2_hit_rate",
    "achieved_occupancy",
    "theoretical_occupancy",
    "registers_per_thread",
    "issue_active",
    "stall_long_scoreboard",
    "stall_short_scoreboard",
    "stall_barrier",
    "stall_mio_throttle",
    "stall_lg_throttle",
    "stall_math_pipe_throttle",
    "stall_wait",
    "stall_not_selected",
    "stall_other",
    "pipe_fma",
    "pipe_alu",
    "pipe_lsu",
    "pipe_tensor",
    "local_spill",
    "launch_count",
)
SIGNATURE_LENGTH = len(SIGNATURE_FIELDS)

# Fractions from the profiler can overshoot 1 slightly (rounding, clock skew); anything far outside
# [0, 1] means the vector was built with another scale or layout.
SIGNATURE_MIN = 0.0
SIGNATURE_MAX = 1.25


def check_signature(values: Sequence[float]) -> list[float]:
    """Return `values` as a list if it is a valid signature; raise ValueError saying what is wrong."""
    if len(values) != SIGNATURE_LENGTH:
        raise ValueError(f"a signature has {SIGNATURE_LENGTH} values ({SIGNATURE_FIELDS[0]} ...), got {len(values)}")
    for name, value in zip(SIGNATURE_FIELDS, values, strict=True):
        if not math.isfinite(value) or not SIGNATURE_MIN <= value <= SIGNATURE_MAX:
            raise ValueError(f"signature field {name} is {value}, outside [{SIGNATURE_MIN}, {SIGNATURE_MAX}]")
    return require_direction([float(value) for value in values])


def require_direction(values: list[float]) -> list[float]:
    """`values`, unless all are zero: such a vector has no direction, so no cosine distance to anything."""
    if not any(values):
        raise ValueError("a signature of all zeros has no direction to compare by cosine distance")
    return values
