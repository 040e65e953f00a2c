"""Bring KB files written by older schema versions up to the current one, one version at a time.

Version 0 was the prototype's layout: `{"version": 0, "states": [...]}`, each state with one optional
`arch` and its optimizations inline, each optimization carrying its own description and category, an
`expected_speedup`, a `failures` count (compile and verification failures were not told apart) and the
raw list of measured `speedups`. No signature layout was recorded; v0 vectors used the current 24-field
layout.

Version 1 stored each optimization's and transition's statistics as a JSON object, and the ids of applied
outcome events as `"iteration.trajectory.step"` strings for the 16 most recent runs only. Version 2
stores statistics as arrays (`stats_fields` names the order) and applied events as per-run step bitmasks.
Everything else in a v1 file passes through unchanged, to be checked by the current schema.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_serializer

from kernelblaster.kb.outcomes import mark_applied
from kernelblaster.kb.schema import SCHEMA_VERSION, STATS_FIELDS, WIN_THRESHOLD, Category, OutcomeStats
from kernelblaster.kb.signature_fields import SIGNATURE_FIELDS

READABLE_VERSIONS = (0, 1, SCHEMA_VERSION)


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


class _V1Stats(BaseModel):
    """v1's statistics object, its fields frozen here so that later schema changes leave this migration alone;
    dumps as the v2 array (bounds and counts are checked by the v2 schema)."""

    model_config = ConfigDict(extra="forbid")

    attempts: int = 0
    compile_failures: int = 0
    verify_failures: int = 0
    crashes: int = 0
    suspicious: int = 0
    measured: int = 0
    wins: int = 0
    geomean_speedup: float | None = None
    best_speedup: float | None = None
    updated_at: datetime | None = None

    @model_serializer
    def _as_v2_array(self) -> list[Any]:
        return [getattr(self, name) for name in STATS_FIELDS]


class _V1Optimization(BaseModel):
    model_config = ConfigDict(extra="allow")

    stats: _V1Stats | None = None


class _V1State(BaseModel):
    model_config = ConfigDict(extra="allow")

    optimizations: list[_V1Optimization] = Field(default_factory=list)


class _V1Transition(BaseModel):
    model_config = ConfigDict(extra="allow")

    stats: _V1Stats | None = None


_V1StepKey = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$")]


class _V1Document(BaseModel):
    model_config = ConfigDict(extra="allow")

    states: dict[str, _V1State]
    transitions: list[_V1Transition] = Field(default_factory=list)
    applied_events: dict[str, list[_V1StepKey]] = Field(default_factory=dict)


def schema_version_of(data: dict[str, Any]) -> Any:
    """The version a KB file declares: `schema_version` from v1 on, `version` before."""
    return data.get("schema_version", data.get("version"))


def migrate_to_current(data: dict[str, Any]) -> dict[str, Any]:
    """The current form of a parsed older KB; raises pydantic's ValidationError where the old file is malformed."""
    version = schema_version_of(data)
    while version != SCHEMA_VERSION:
        data = _NEXT_VERSION[version](data)
        version = schema_version_of(data)
    return data


def _v0_to_v1(data: dict[str, Any]) -> dict[str, Any]:
    old = _V0Document.model_validate(data)
    techniques: dict[str, dict[str, Any]] = {}
    states = {}
    for state in old.states:
        for optimization in state.optimizations:
            techniques.setdefault(
                optimization.technique,
                {"category": optimization.category, "description": optimization.description},
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
    return {"schema_version": 1, "signature_fields": list(SIGNATURE_FIELDS), "techniques": techniques, "states": states}


def _v0_stats(optimization: _V0Optimization) -> dict[str, Any]:
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
    )._asdict()


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    old = _V1Document.model_validate(data)
    migrated = old.model_dump(exclude_unset=True, exclude={"applied_events"})
    migrated.update(
        schema_version=2,
        stats_fields=list(STATS_FIELDS),
        applied_steps={run: _step_masks(keys) for run, keys in old.applied_events.items()},
    )
    return migrated


def _step_masks(step_keys: list[str]) -> list[list[int]]:
    """v1's `"iteration.trajectory.step"` ids of one run as v2's `[iteration][trajectory]` step bitmasks."""
    steps: list[list[int]] = []
    for key in step_keys:
        iteration, trajectory, step = map(int, key.split("."))
        mark_applied(steps, iteration, trajectory, step)
    return steps


_NEXT_VERSION: dict[Any, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _v0_to_v1, 1: _v1_to_v2}
