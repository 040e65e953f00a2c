"""The precision policies a run may choose, by name: the one list the run context, the command line, the
harness and the KB check names against (kb never imports harness, so the names live here).

A technique may declare the policies under which its kernels can pass verification (fp16 tensor-core
operands fail `strict`'s fp32 tolerance, for one); selection offers it only under those. The harness owns
what each policy means (tolerances, baseline flags); the KB only needs the names, checked against this list.
"""

from __future__ import annotations

from typing import Literal, get_args

PrecisionPolicy = Literal["strict", "tf32", "fp16", "pytorch-default"]
PRECISION_POLICIES: tuple[PrecisionPolicy, ...] = get_args(PrecisionPolicy)


def check_precision_policy(name: str) -> PrecisionPolicy:
    """`name` if it is a known precision policy; raise ValueError listing the known ones otherwise."""
    for policy in PRECISION_POLICIES:
        if name == policy:
            return policy
    raise ValueError(f"unknown precision policy {name!r}; known policies: {', '.join(PRECISION_POLICIES)}")
