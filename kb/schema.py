"""The KB's data model (schema version 2): techniques, performance states, their optimizations, transitions.

The JSON file is a `KBDocument` dumped by pydantic; every bound a hand edit could break is checked here,
so a document that validates is one the rest of `kb` can trust. Version 2 stores outcome statistics as
arrays, remembers applied outcome events as per-run step bitmasks, and keeps a log of what was pruned.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from kernelblaster.kb.operations import OperationKind
from kernelblaster.kb.precision import PrecisionPolicy
from kernelblaster.kb.signature_fields import SIGNATURE_LENGTH, SIGNATURE_MAX, SIGNATURE_MIN, require_direction
from kernelblaster.kb.snippets import snippet_names

SCHEMA_VERSION = 2

# How many measured outcomes weigh as much as the prior: evidence gets confidence n / (n + this).
PRIOR_WEIGHT = 3.0
MAX_LESSONS = 4
MAX_SECONDARY = 6
MIN_SPEEDUP = 0.05
MAX_PRIOR_SPEEDUP = 10.0

SLUG_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
Slug = Annotated[str, StringConstraints(pattern=SLUG_PATTERN)]
Arch = Annotated[str, StringConstraints(pattern=r"^sm_[0-9]{2,3}[a-z]?$")]
ShortText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=160)]
LongText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=10, max_length=700)]
Lesson = Annotated[str, StringConstraints(strip_whitespace=True, min_length=10, max_length=400)]
PriorSpeedup = Annotated[float, Field(ge=MIN_SPEEDUP, le=MAX_PRIOR_SPEEDUP)]
NonNegative = Annotated[int, Field(ge=0)]
PositiveSpeedup = Annotated[float, Field(gt=0)]
# Run ids name snapshot folders, so they are restricted to characters safe in a file name.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
RunId = Annotated[str, StringConstraints(pattern=RUN_ID_PATTERN)]
# Bit s of a step mask says that step s's outcome was applied (7 = steps 0, 1 and 2).
StepMask = NonNegative
MAX_RECENTLY_PRUNED = 32


# Length and bounds are checked by pydantic's compiled validators: a 10,000-state KB loads in well under a
# second only if no Python runs per signature value.
SignatureValue = Annotated[float, Field(ge=SIGNATURE_MIN, le=SIGNATURE_MAX, allow_inf_nan=False)]
Signature = Annotated[
    list[SignatureValue],
    Field(min_length=SIGNATURE_LENGTH, max_length=SIGNATURE_LENGTH),
    AfterValidator(require_direction),
]


class KBModel(BaseModel):
    """Base of every KB model: unknown keys are errors, so a typo in a hand edit is caught on load."""

    model_config = ConfigDict(extra="forbid")


class Category(StrEnum):
    """What part of a kernel an optimization changes."""

    MEMORY = "memory"
    COMPUTE = "compute"
    PARALLELISM = "parallelism"
    CONTROL_FLOW = "control_flow"
    FUSION = "fusion"
    ALGORITHM = "algorithm"
    LAUNCH = "launch"


class OutcomeStatus(StrEnum):
    """How one attempt at an optimization ended."""

    COMPILE_FAILED = "compile_failed"
    VERIFY_FAILED = "verify_failed"
    CRASHED = "crashed"
    MEASURED = "measured"
    SUSPICIOUS = "suspicious"


def _known_snippet(name: str) -> str:
    if name not in snippet_names():
        raise ValueError(f"no shipped snippet named {name!r} (known: {', '.join(sorted(snippet_names()))})")
    return name


_Name = TypeVar("_Name", bound=str)


def _distinct(names: list[_Name]) -> list[_Name]:
    if len(set(names)) != len(names):
        raise ValueError(f"names listed more than once: {names}")
    return names


PolicyList = Annotated[list[PrecisionPolicy], Field(min_length=1), AfterValidator(_distinct)]
OperationList = Annotated[list[OperationKind], Field(min_length=1), AfterValidator(_distinct)]
SnippetName = Annotated[Slug, AfterValidator(_known_snippet)]


class Technique(KBModel):
    """A CUDA optimization in the catalogue; states refer to it by name.

    `precision_policies`: the runs' precision policies under which its kernels can pass verification
    (absent: every policy); selection never offers it under another. `applies_to`: the kinds of operation
    it needs in the problem, any one of them (absent: any problem); selection never offers it for a problem
    known to have none. `snippet`: the name of a shipped, verified code snippet (kb/seed/snippets/NAME.cu)
    that shows the technique.
    """

    category: Category
    description: LongText
    precision_policies: PolicyList | None = None
    applies_to: OperationList | None = None
    snippet: SnippetName | None = None

    def valid_under(self, policy: str) -> bool:
        """Whether kernels applying this technique can pass verification under precision policy `policy`."""
        return self.precision_policies is None or policy in self.precision_policies

    def applies_to_problem(self, operations: Collection[OperationKind] | None) -> bool:
        """Whether the technique can apply to a problem performing `operations` (None: not known, so it may)."""
        return self.applies_to is None or operations is None or any(kind in operations for kind in self.applies_to)


class OutcomeStats(NamedTuple):
    """What attempts at one technique (or one transition) have shown so far.

    A named tuple, stored in the file as one JSON array in the order of `STATS_FIELDS` (the file names
    the order in its `stats_fields`): a KB holds tens of thousands of these, and an array is a third
    the size of an object and about half the time to load. Immutable: each outcome makes a new one, so
    `NO_OUTCOMES` can be shared by every untried entry. Counts are checked where a document is validated
    (`CheckedStats`).
    """

    attempts: NonNegative = 0
    compile_failures: NonNegative = 0
    verify_failures: NonNegative = 0
    crashes: NonNegative = 0
    suspicious: NonNegative = 0
    measured: NonNegative = 0
    wins: NonNegative = 0
    geomean_speedup: PositiveSpeedup | None = None
    best_speedup: PositiveSpeedup | None = None
    updated_at: datetime | None = None

    @property
    def failures(self) -> int:
        return self.compile_failures + self.verify_failures + self.crashes

    @property
    def confidence(self) -> float:
        """The weight measured evidence gets against the prior, from 0 (none) towards 1."""
        return round(self.measured / (self.measured + PRIOR_WEIGHT), 3)

    def with_outcome(self, status: OutcomeStatus, speedup: float | None, when: datetime) -> OutcomeStats:
        """These statistics after one more attempt that ended with `status` (and `speedup` if measured)."""
        update: dict[str, Any] = {"attempts": self.attempts + 1, "updated_at": when}
        if status is OutcomeStatus.MEASURED:
            assert speedup is not None
            update.update(_measured_update(self, speedup))
        else:
            counter = _FAILURE_COUNTERS[status]
            update[counter] = getattr(self, counter) + 1
        return self._replace(**update)

    def combined_with(self, other: OutcomeStats) -> OutcomeStats:
        """The statistics of both sets of attempts together (used when two states merge)."""
        measured = self.measured + other.measured
        log_sum = _log_total(self) + _log_total(other)
        bests = [best for best in (self.best_speedup, other.best_speedup) if best is not None]
        times = [when for when in (self.updated_at, other.updated_at) if when is not None]
        return OutcomeStats(
            attempts=self.attempts + other.attempts,
            compile_failures=self.compile_failures + other.compile_failures,
            verify_failures=self.verify_failures + other.verify_failures,
            crashes=self.crashes + other.crashes,
            suspicious=self.suspicious + other.suspicious,
            measured=measured,
            wins=self.wins + other.wins,
            geomean_speedup=_rounded(math.exp(log_sum / measured)) if measured else None,
            best_speedup=max(bests) if bests else None,
            updated_at=max(times) if times else None,
        )


STATS_FIELDS: tuple[str, ...] = OutcomeStats._fields


def check_stats(stats: OutcomeStats) -> OutcomeStats:
    """`stats`, if its counts are consistent; raise ValueError saying which are not."""
    endings = stats.failures + stats.suspicious + stats.measured
    if endings != stats.attempts:
        raise ValueError(f"attempts ({stats.attempts}) must equal failures + suspicious + measured ({endings})")
    if stats.wins > stats.measured:
        raise ValueError(f"wins ({stats.wins}) cannot exceed measured ({stats.measured})")
    if (stats.geomean_speedup is None) != (stats.measured == 0):
        raise ValueError("geomean_speedup is given exactly when measured > 0")
    return stats


# The statistics as a document holds them: field bounds by pydantic's compiled validators, the counts by
# one short Python check.
CheckedStats = Annotated[OutcomeStats, AfterValidator(check_stats)]


NO_OUTCOMES = OutcomeStats()

_FAILURE_COUNTERS = {
    OutcomeStatus.COMPILE_FAILED: "compile_failures",
    OutcomeStatus.VERIFY_FAILED: "verify_failures",
    OutcomeStatus.CRASHED: "crashes",
    OutcomeStatus.SUSPICIOUS: "suspicious",
}

# A step counts as a win only if it beats measurement noise, not merely 1.0.
WIN_THRESHOLD = 1.02


def _rounded(speedup: float) -> float:
    # Four decimals are far below timing noise; more only lengthen the file.
    return round(speedup, 4)


def _log_total(stats: OutcomeStats) -> float:
    return stats.measured * math.log(stats.geomean_speedup) if stats.geomean_speedup else 0.0


def _measured_update(stats: OutcomeStats, speedup: float) -> dict[str, Any]:
    measured = stats.measured + 1
    return {
        "measured": measured,
        "wins": stats.wins + (speedup >= WIN_THRESHOLD),
        "geomean_speedup": _rounded(math.exp((_log_total(stats) + math.log(speedup)) / measured)),
        "best_speedup": _rounded(max(speedup, stats.best_speedup or speedup)),
    }


class Optimization(KBModel):
    """A technique as it applies to one state: its prior and what attempts in this state have shown."""

    technique: Slug
    prior_speedup: PriorSpeedup
    stats: CheckedStats = NO_OUTCOMES
    lessons: list[Lesson] = Field(default_factory=list, max_length=MAX_LESSONS)
    deprecated: ShortText | None = None


class PerformanceState(KBModel):
    """What limits a kernel, as a profile shows it, and the optimizations worth trying there."""

    id: Slug
    name: ShortText
    primary_bottleneck: ShortText
    secondary: list[ShortText] = Field(default_factory=list, max_length=MAX_SECONDARY)
    description: LongText
    signature: Signature
    arches: list[Arch] = Field(default_factory=list)
    optimizations: list[Optimization] = Field(default_factory=list)
    deprecated: ShortText | None = None

    @model_validator(mode="after")
    def _techniques_unique(self) -> PerformanceState:
        names = [optimization.technique for optimization in self.optimizations]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"state {self.id} lists techniques more than once: {', '.join(duplicates)}")
        return self

    def optimization(self, technique: str) -> Optimization | None:
        return next((opt for opt in self.optimizations if opt.technique == technique), None)


class Transition(KBModel):
    """One technique applied right after another (phase ordering), with the outcomes of the second."""

    before: Slug
    after: Slug
    stats: CheckedStats = NO_OUTCOMES


class PruneLog(KBModel):
    """What pruning has removed from this KB so far: totals, and the latest states and optimizations removed
    (`state` and `state/technique`)."""

    optimizations: NonNegative = 0
    states: NonNegative = 0
    transitions: NonNegative = 0
    last_pruned_at: datetime | None = None
    recent: list[str] = Field(default_factory=list, max_length=MAX_RECENTLY_PRUNED)


class KBDocument(KBModel):
    """The whole knowledge base as stored in its JSON file.

    `applied_steps[run][iteration][trajectory]` is the bitmask of the steps whose outcome events were
    applied, so a replayed event of any run is recognised however old the run is.
    """

    schema_version: Literal[2]
    signature_fields: list[str]
    stats_fields: list[str]
    techniques: dict[Slug, Technique]
    states: dict[Slug, PerformanceState]
    transitions: list[Transition] = Field(default_factory=list)
    state_aliases: dict[Slug, Slug] = Field(default_factory=dict)
    pruned: PruneLog = Field(default_factory=PruneLog)
    applied_steps: dict[RunId, list[list[StepMask]]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _references_resolve(self) -> KBDocument:
        for key, state in self.states.items():
            if key != state.id:
                raise ValueError(f"states[{key}] holds a state whose id is {state.id}")
            for optimization in state.optimizations:
                if optimization.technique not in self.techniques:
                    raise ValueError(f"state {key} refers to unknown technique {optimization.technique}")
        for old, new in self.state_aliases.items():
            if new not in self.states:
                raise ValueError(f"state alias {old} points to missing state {new}")
        return self

    def resolve_state(self, state_id: str) -> PerformanceState | None:
        """The state with this id, following merges (a merged state's id leads to the state it joined)."""
        return self.states.get(self.state_aliases.get(state_id, state_id))

    def transition(self, before: str, after: str) -> Transition | None:
        return next((t for t in self.transitions if t.before == before and t.after == after), None)
