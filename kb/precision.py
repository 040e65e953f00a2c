"""The precision policies a run may choose, by name, as the KB knows them (kb never imports harness).

A technique may declare the policies under which its kernels can pass verification (fp16 tensor-core
operands fail `strict`'s fp32 tolerance, for one); selection offers it only under those. The harness owns
what each policy means (tolerances, baseline flags); the KB only needs the names, checked against this list.
"""

from __future__ import annotations

from typing import Literal, get_args

PrecisionPolicyName = Literal["strict", "tf32", "fp16", "pytorch-default"]
PRECISION_POLICIES: tuple[PrecisionPolicyName, ...] = get_args(PrecisionPolicyName)


def check_precision_policy(name: str) -> PrecisionPolicyName:
    """`name` if it is a known precision policy; raise ValueError listing the known ones otherwise."""
    for policy in PRECISION_POLICIES:
        if name == policy:
            return policy
    raise ValueError(f"unknown precision policy {name!r}; known policies: {', '.join(PRECISION_POLICIES)}")
