"""Bring KB files written by older schema versions up to the current one.

Version 0 was the prototype's layout: `{"version": 0, "states": [...]}`, each state with one optional
`arch` and its optimizations inline, each optimization carrying its own description and category, an
`expected_speedup`, a `failures` count (compile and verification failures were not told apart) and the
raw list of measured `speedups`. No signature layout was recorded; v0 vectors used
the current 24-field layout.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from kernelblaster.kb.schema import (
    SCHEMA_VERSION,
    WIN_THRESHOLD,
    Category,
    KBDocument,
    OutcomeStats,
    Technique,
)
from kernelblaster.kb.signature_fields import SIGNATURE_FIELDS

READABLE_VERSIONS = (0, SCHEMA_VERSION)


class _V0Optimization(BaseModel):
    model_config = ConfigDict(extra="forbid")

    technique: str
    category: Category
    description: str
    expected_speedup: float = Field(gt=0)
    failures: int = Field(default=0, ge=0)
    speedups: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list)


class _V0State(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    bottleneck: str
    description: str
    signature: list[float]
    arch: str | None = None
    optimizations: list[_V0Optimization] = Field(default_factory=list)


class _V0Document(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int
    states: list[_V0State]


def schema_version_of(data: dict[str, Any]) -> Any:
    """The version a KB file declares: `schema_version` from v1 on, `version` before."""
    return data.get("schema_version", data.get("version"))


def migrate_to_current(data: dict[str, Any]) -> dict[str, Any]:
    """The v1 form of a parsed older KB; raises pydantic's ValidationError where the old file is malformed."""
    return _v0_to_v1(_V0Document.model_validate(data)).model_dump(mode="json")


def _v0_to_v1(old: _V0Document) -> KBDocument:
    techniques: dict[str, Technique] = {}
    states = {}
    for state in old.states:
        for optimization in state.optimizations:
            techniques.setdefault(
                optimization.technique,
                Technique(category=optimization.category, description=optimization.description),
            )
        states[state.id] = {
            "id": state.id,
            "name": state.name,
            "primary_bottleneck": state.bottleneck,
            "description": state.description,
            "signature": state.signature,
            "arches": [state.arch] if state.arch else [],
            "optimizations": [
                {
                    "technique": optimization.technique,
                    "prior_speedup": optimization.expected_speedup,
                    "stats": _v0_stats(optimization),
                }
                for optimization in state.optimizations
            ],
        }
    return KBDocument.model_validate(
        {
            "schema_version": SCHEMA_VERSION,
            "signature_fields": list(SIGNATURE_FIELDS),
            "techniques": techniques,
            "states": states,
        }
    )


def _v0_stats(optimization: _V0Optimization) -> OutcomeStats:
    speedups = optimization.speedups
    measured = len(speedups)
    # v0 did not say why an attempt failed; a failed verification is the cautious reading.
    return OutcomeStats(
        attempts=optimization.failures + measured,
        verify_failures=optimization.failures,
        measured=measured,
        wins=sum(speedup >= WIN_THRESHOLD for speedup in speedups),
        geomean_speedup=math.exp(sum(map(math.log, speedups)) / measured) if measured else None,
        best_speedup=max(speedups) if speedups else None,
    )
