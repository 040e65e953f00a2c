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
from kernelblaster.kb.schema import KBDocument

CATALOGUE_FIELDS = ("precision_policies", "applies_to", "snippet")


def adopt_seed_catalogue(document: KBDocument) -> dict[str, list[str]]:
    """Fill `document`'s techniques in place from the seed's; for each technique changed, the fields filled."""
    seed = decode(Path("seed_kb.json"), seed_kb_bytes()).document
    filled: dict[str, list[str]] = {}
    for name, technique in document.techniques.items():
        shipped = seed.techniques.get(name)
        if shipped is None:
            continue
        missing = [field for field in CATALOGUE_FIELDS
                   if getattr(technique, field) is None and getattr(shipped, field) is not None]
        if missing:
            document.techniques[name] = technique.model_copy(
                update={field: getattr(shipped, field) for field in missing})
            filled[name] = missing
    return filled
