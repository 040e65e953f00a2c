"""The names of the precision policies (`harness.precision` says what each allows), importable without torch
so that command-line parsers and the run context can name them."""

from __future__ import annotations

from typing import Literal, get_args

PrecisionPolicy = Literal["strict", "tf32", "fp16", "pytorch-default"]
PRECISION_POLICIES: tuple[PrecisionPolicy, ...] = get_args(PrecisionPolicy)
