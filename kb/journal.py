"""The journal of a run's KB changes: every outcome and every edit a run applies to its KB, one JSON line
each, under an id that makes replaying it idempotent.

A run appends a change before applying it, so its journal holds at least what its KB learned (a change a
resumed run repeats appears twice, under one id). `read_changes` gives each change once, in the run's
logical order (iteration by iteration: the steps, then the learning edits), and `replay` applies them to
another document; a benchmark suite builds its shared KB this way, one problem after the other.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from kernelblaster.kb.edits import KBEdit, apply_edits
from kernelblaster.kb.errors import KBLookupError
from kernelblaster.kb.outcomes import OutcomeEvent, apply_outcome
from kernelblaster.kb.pruning import DEFAULT_POLICY as DEFAULT_PRUNE_POLICY
from kernelblaster.kb.pruning import prune
from kernelblaster.kb.schema import KBDocument, KBModel, RunId

ChangeKind = Literal["discovery", "outcome", "learning"]
# Within a step, the state it discovered comes before the outcome learned in it.
_KIND_ORDER: dict[str, int] = {"discovery": 0, "outcome": 1, "learning": 2}


class ChangeId(KBModel):
    """Where in a run a change was made: a step's discovery or outcome, or an iteration's learning."""

    model_config = KBModel.model_config | {"frozen": True}

    run_id: RunId
    iteration: int = Field(ge=0)
    trajectory: int = Field(default=0, ge=0)
    step: int = Field(default=0, ge=0)
    kind: ChangeKind

    @property
    def key(self) -> str:
        return f"{self.run_id}/{self.iteration}.{self.trajectory}.{self.step}/{self.kind}"

    @property
    def order(self) -> tuple[int, int, int, int, int]:
        """Iteration by iteration: every step (by trajectory, then depth), then the iteration's learning."""
        learning = self.kind == "learning"
        return (self.iteration, learning, self.trajectory, self.step, _KIND_ORDER[self.kind])


class KBChange(KBModel):
    """One change: an outcome (learned at time `at`) or a list of edits."""

    id: ChangeId
    at: datetime
    outcome: OutcomeEvent | None = None
    edits: list[KBEdit] = Field(default_factory=list)

    @classmethod
    def of_outcome(cls, event: OutcomeEvent, at: datetime) -> KBChange:
        event_id = event.event_id
        return cls(id=ChangeId(run_id=event_id.run_id, iteration=event_id.iteration,
                               trajectory=event_id.trajectory, step=event_id.step, kind="outcome"),
                   at=at, outcome=event)


class ReplayReport(BaseModel):
    """What became of a replayed journal: changes applied, and why the others were not."""

    applied: int = 0
    rejected: list[str] = Field(default_factory=list)


def append_change(path: Path, change: KBChange) -> None:
    """Add `change` as one line, on disk before this returns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as journal:
        journal.write(change.model_dump_json() + "\n")
        journal.flush()
        os.fsync(journal.fileno())


def read_changes(path: Path) -> list[KBChange]:
    """The journal's changes, each id once (the first written), in logical order; none if there is no file.
    A last line cut short by a kill is ignored; a damaged line elsewhere is an error."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    changes: dict[str, KBChange] = {}
    for number, line in enumerate(lines, start=1):
        try:
            change = KBChange.model_validate_json(line)
        except ValidationError:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: not a KB change") from None
        changes.setdefault(change.id.key, change)
    return sorted(changes.values(), key=lambda change: change.id.order)


def replay(document: KBDocument, changes: Sequence[KBChange]) -> ReplayReport:
    """Apply `changes` to `document` in the order given, as `KnowledgeBase` applies them (edits followed by a
    prune, at the change's time); an outcome the document already holds is skipped."""
    report = ReplayReport()
    for change in changes:
        if change.outcome is not None:
            try:
                report.applied += apply_outcome(document, change.outcome, change.at)
            except KBLookupError as error:
                report.rejected.append(f"{change.id.key}: {error}")
            continue
        for result in apply_edits(document, change.edits):
            if result.applied:
                report.applied += 1
            else:
                report.rejected.append(f"{change.id.key}: {result.kind}: {result.reason}")
        prune(document, DEFAULT_PRUNE_POLICY, change.at)
    return report
