"""Structured KB edits proposed by the learning step (ParameterUpdate), validated and applied one by one.

An edit that refers to a missing state or technique, duplicates an entry or breaks a bound is rejected
with a reason the learning step can read; the others still apply. Every edit checks before it changes
anything, so a rejected edit leaves the document as it was.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError, model_validator

from kernelblaster.kb.codec import describe_validation_error
from kernelblaster.kb.operations import OperationKind
from kernelblaster.kb.schema import (
    MAX_LESSONS,
    MAX_SECONDARY,
    Category,
    KBDocument,
    KBModel,
    Lesson,
    LongText,
    OperationList,
    Optimization,
    PerformanceState,
    PolicyList,
    PriorSpeedup,
    ShortText,
    Slug,
    Technique,
)


class EditRejected(Exception):
    """Why an edit cannot be applied to the document as it stands."""


class AddState(KBModel):
    """A performance state the KB has not seen, with the optimizations worth trying there."""

    kind: Literal["add_state"] = "add_state"
    state: PerformanceState

    def apply_to(self, document: KBDocument) -> None:
        if document.resolve_state(self.state.id) is not None:
            raise EditRejected(f"state {self.state.id} already exists")
        unknown = [o.technique for o in self.state.optimizations if o.technique not in document.techniques]
        if unknown:
            raise EditRejected(f"unknown techniques {', '.join(unknown)}: add them with add_optimization")
        # Profiles give 17 significant digits; four decimals are far below their noise and a third the size.
        signature = [round(value, 4) for value in self.state.signature]
        document.states[self.state.id] = self.state.model_copy(update={"signature": signature})


class AddOptimization(KBModel):
    """A technique to try in a state; a technique new to the catalogue also needs category and description."""

    kind: Literal["add_optimization"] = "add_optimization"
    state_id: str
    technique: Slug
    prior_speedup: PriorSpeedup
    category: Category | None = None
    description: LongText | None = None
    # Only for a new technique: the precision policies its kernels can pass under (absent: all).
    precision_policies: PolicyList | None = None
    applies_to: OperationList | None = Field(
        default=None, description="Only for a new technique: the kinds of operation a problem must perform (any "
                                  "one) for it to apply; leave it out unless the technique only makes sense for them")

    def apply_to(self, document: KBDocument) -> str | None:
        """Add the optimization; for a technique already in the catalogue, name the catalogue fields given
        here that differ from its own and were therefore left as they are."""
        state = _state(document, self.state_id)
        if state.optimization(self.technique) is not None:
            raise EditRejected(f"state {state.id} already has technique {self.technique}")
        existing = document.techniques.get(self.technique)
        if existing is None:
            if self.category is None or self.description is None:
                raise EditRejected(f"technique {self.technique} is new: give its category and description")
            document.techniques[self.technique] = Technique(
                category=self.category, description=self.description, precision_policies=self.precision_policies,
                applies_to=self.applies_to,
            )
        state.optimizations.append(Optimization(technique=self.technique, prior_speedup=self.prior_speedup))
        return None if existing is None else self._catalogue_fields_kept(existing)

    def _catalogue_fields_kept(self, existing: Technique) -> str | None:
        # The catalogue entry is shared by every state: one state's edit must not redefine it for the others.
        differing = [name for name in ("category", "description", "precision_policies", "applies_to")
                     if getattr(self, name) is not None and getattr(self, name) != getattr(existing, name)]
        if not differing:
            return None
        return (f"technique {self.technique} is already in the catalogue and its entry stays as it is: the "
                f"{', '.join(differing)} given here went unused (set_description rewrites a description)")

    def offered_for(self, operations: Collection[OperationKind] | None) -> AddOptimization:
        """This edit, with `applies_to` widened so that the problem it was learned on (performing
        `operations`) is still offered the technique: the evidence came from there. A problem of no named kind
        (a lone elementwise map) matches no list, so then the limit is dropped."""
        if self.applies_to is None or operations is None or set(self.applies_to) & set(operations):
            return self
        if not operations:
            return self.model_copy(update={"applies_to": None})
        missing = [kind for kind in operations if kind not in self.applies_to]
        return self.model_copy(update={"applies_to": [*self.applies_to, *missing]})


class SetPrior(KBModel):
    """A corrected prior expected speedup for a technique in a state."""

    kind: Literal["set_prior"] = "set_prior"
    state_id: str
    technique: str
    prior_speedup: PriorSpeedup

    def apply_to(self, document: KBDocument) -> None:
        _optimization(document, self.state_id, self.technique).prior_speedup = self.prior_speedup


class SetDescription(KBModel):
    """A rewritten description of a state or of a catalogue technique."""

    kind: Literal["set_description"] = "set_description"
    target: Literal["state", "technique"]
    id: str
    description: LongText

    def apply_to(self, document: KBDocument) -> None:
        if self.target == "state":
            _state(document, self.id).description = self.description
        elif self.id in document.techniques:
            document.techniques[self.id].description = self.description
        else:
            raise EditRejected(f"no technique {self.id!r} in the catalogue")


class AddLesson(KBModel):
    """A lesson about a technique in a state; the oldest lesson goes when there are too many."""

    kind: Literal["add_lesson"] = "add_lesson"
    state_id: str
    technique: str
    lesson: Lesson

    def apply_to(self, document: KBDocument) -> None:
        optimization = _optimization(document, self.state_id, self.technique)
        if self.lesson in optimization.lessons:
            raise EditRejected("the same lesson is already recorded")
        optimization.lessons = [*optimization.lessons, self.lesson][-MAX_LESSONS:]


class Deprecate(KBModel):
    """Stop offering a technique in a state, or a whole state (no technique given), keeping its history."""

    kind: Literal["deprecate"] = "deprecate"
    state_id: str
    technique: str | None = None
    reason: ShortText

    def apply_to(self, document: KBDocument) -> None:
        target = (
            _state(document, self.state_id)
            if self.technique is None
            else _optimization(document, self.state_id, self.technique)
        )
        if target.deprecated is not None:
            raise EditRejected(f"already deprecated: {target.deprecated}")
        target.deprecated = self.reason


class MergeStates(KBModel):
    """Fold a duplicate state into another: evidence adds up, and the merged id resolves to the kept one."""

    kind: Literal["merge_states"] = "merge_states"
    keep: str
    merge: str

    @model_validator(mode="after")
    def _distinct(self) -> MergeStates:
        if self.keep == self.merge:
            raise ValueError("a state cannot be merged into itself")
        return self

    def apply_to(self, document: KBDocument) -> None:
        kept, merged = _state(document, self.keep), _state(document, self.merge)
        if kept.id == merged.id:
            raise EditRejected(f"{self.merge} was already merged into {kept.id}")
        for optimization in merged.optimizations:
            _fold_optimization(kept, optimization)
        kept.arches = sorted({*kept.arches, *merged.arches})
        kept.secondary = list(dict.fromkeys([*kept.secondary, *merged.secondary]))[:MAX_SECONDARY]
        del document.states[merged.id]
        for alias, target in document.state_aliases.items():
            if target == merged.id:
                document.state_aliases[alias] = kept.id
        document.state_aliases[merged.id] = kept.id


KBEdit = Annotated[
    AddState | AddOptimization | SetPrior | SetDescription | AddLesson | Deprecate | MergeStates,
    Field(discriminator="kind"),
]
_EDIT_ADAPTER: TypeAdapter[KBEdit] = TypeAdapter(KBEdit)


class EditResult(BaseModel):
    """What became of one proposed edit: applied, or rejected and why."""

    index: int
    kind: str
    applied: bool
    reason: str = Field(default="", description="Why it was rejected; for an applied edit, what it left unchanged")


def apply_edits(document: KBDocument, edits: Sequence[KBEdit | Mapping[str, Any]]) -> list[EditResult]:
    """Apply each edit in order; raw mappings (an LLM's JSON) are validated first. One result per edit."""
    return [_apply_one(document, index, edit) for index, edit in enumerate(edits)]


def _apply_one(document: KBDocument, index: int, edit: KBEdit | Mapping[str, Any]) -> EditResult:
    kind = str(edit.get("kind", "?")) if isinstance(edit, Mapping) else edit.kind
    try:
        parsed = _EDIT_ADAPTER.validate_python(edit) if isinstance(edit, Mapping) else edit
        note = parsed.apply_to(document)
    except ValidationError as error:
        return EditResult(index=index, kind=kind, applied=False, reason=describe_validation_error(error))
    except EditRejected as rejection:
        return EditResult(index=index, kind=kind, applied=False, reason=str(rejection))
    return EditResult(index=index, kind=kind, applied=True, reason=note or "")


def _state(document: KBDocument, state_id: str) -> PerformanceState:
    state = document.resolve_state(state_id)
    if state is None:
        raise EditRejected(f"no state {state_id!r} in the KB")
    return state


def _optimization(document: KBDocument, state_id: str, technique: str) -> Optimization:
    state = _state(document, state_id)
    optimization = state.optimization(technique)
    if optimization is None:
        raise EditRejected(f"state {state.id} has no technique {technique!r}")
    return optimization


def _fold_optimization(kept: PerformanceState, incoming: Optimization) -> None:
    existing = kept.optimization(incoming.technique)
    if existing is None:
        kept.optimizations.append(incoming)
        return
    existing.stats = existing.stats.combined_with(incoming.stats)
    existing.lessons = list(dict.fromkeys([*existing.lessons, *incoming.lessons]))[-MAX_LESSONS:]
