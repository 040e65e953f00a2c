"""Bring a KB's technique catalogue up to the shipped seed: the fields that later versions of the seed
declare for its techniques (the precision policies they pass under, the operation kinds they need, their
verified snippet), copied into the same-named techniques of an older KB that lacks them.

Only missing fields are filled: what the KB learned or a person edited (descriptions, states, evidence,
fields it already sets) stays as it is.
"""

from __future__ import annotations

from pathlib import Path

from kernelblaster.kb.codec import decode
from kernelblaster.kb.paths import seed_kb_bytes
from kernelblaster.kb.schema import KBDocument, Technique

CATALOGUE_FIELDS = ("precision_policies", "applies_to", "snippet")
FIELD_NAMES = {"precision_policies": "precision policies", "applies_to": "operation kinds", "snippet": "snippets"}


def catalogue_gaps(document: KBDocument) -> dict[str, list[str]]:
    """For each technique `document` shares with the seed, the catalogue fields the seed declares and it lacks."""
    return _gaps(document, _seed_techniques())


def adopt_seed_catalogue(document: KBDocument) -> dict[str, list[str]]:
    """Fill `document`'s techniques in place from the seed's; for each technique changed, the fields filled."""
    seed = _seed_techniques()
    gaps = _gaps(document, seed)
    for name, missing in gaps.items():
        document.techniques[name] = document.techniques[name].model_copy(
            update={field: getattr(seed[name], field) for field in missing})
    return gaps


def describe_gaps(gaps: dict[str, list[str]]) -> str | None:
    """One line telling a user that the KB predates the seed's catalogue, and the command that fills it in."""
    missing = {field for fields in gaps.values() for field in fields}
    if not missing:
        return None
    names = [FIELD_NAMES[field] for field in CATALOGUE_FIELDS if field in missing]
    listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
    # Missing policies or kinds widen what is offered; a missing snippet only leaves an example out.
    widens = " (so it offers them more widely)" if missing & {"precision_policies", "applies_to"} else ""
    return (f"the KB lacks the {listed} that this version's seed declares for {len(gaps)} of its techniques"
            f"{widens}; `kernelblaster kb update-catalogue` fills them in")


def _gaps(document: KBDocument, seed: dict[str, Technique]) -> dict[str, list[str]]:
    gaps: dict[str, list[str]] = {}
    for name, technique in document.techniques.items():
        shipped = seed.get(name)
        if shipped is None:
            continue
        missing = [field for field in CATALOGUE_FIELDS
                   if getattr(technique, field) is None and getattr(shipped, field) is not None]
        if missing:
            gaps[name] = missing
    return gaps


def _seed_techniques() -> dict[str, Technique]:
    return decode(Path("seed_kb.json"), seed_kb_bytes()).document.techniques
