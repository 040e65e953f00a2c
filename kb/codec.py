"""Turn KB file bytes into a validated `KBDocument` and back, with one-line errors that say where it is wrong."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from kernelblaster.kb.errors import KBFileError
from kernelblaster.kb.migrate import READABLE_VERSIONS, migrate_to_current, schema_version_of
from kernelblaster.kb.schema import SCHEMA_VERSION, STATS_FIELDS, KBDocument
from kernelblaster.kb.signature_fields import SIGNATURE_FIELDS

_Parsed = TypeVar("_Parsed")

# Record boundaries in pydantic's compact JSON. Inside a JSON string every quote is escaped, so an
# unescaped `{"technique":` (say) can only be structure, never text. Plain string splitting, not regular
# expressions: a 10,000-state KB is ten megabytes.
_TOP_LEVEL_KEYS = (
    "signature_fields",
    "stats_fields",
    "techniques",
    "states",
    "transitions",
    "state_aliases",
    "pruned",
    "applied_steps",
)
_RECORDS = ('{"technique":', "    "), ('{"before":', "  ")
# Keyed records: a catalogue technique, a state, and a run's step bitmasks (only after `"applied_steps":`,
# the last key, since other nested lists look the same).
_KEYED_RECORDS = (':{"category":', "  "), (':{"id":', "  ")
_STEPS_KEY = '"applied_steps":'
_RUN_MARKER = ":[["

# Each layout the file records, what this version expects, and what a mismatch would break.
_LAYOUTS = (
    ("signature_fields", SIGNATURE_FIELDS, "its signatures cannot be compared with new profiles"),
    ("stats_fields", STATS_FIELDS, "its statistics would be read in the wrong order"),
)


@dataclass(frozen=True)
class DecodedKB:
    """A document read from a file, and the older schema version it was migrated from, if any."""

    document: KBDocument
    migrated_from: int | None


def decode(path: Path, raw: bytes) -> DecodedKB:
    """Parse and validate the bytes of the KB file at `path`; raise KBFileError naming what is wrong."""
    # pydantic parses and validates a current, valid file in one pass, several times faster than
    # json.loads + model_validate; anything else takes the careful path, which explains what is wrong.
    try:
        with _collector_paused():
            document = KBDocument.model_validate_json(raw)
    except ValidationError:
        return _decode_carefully(path, raw)
    if any(getattr(document, key) != list(expected) for key, expected, _ in _LAYOUTS):
        return _decode_carefully(path, raw)
    return DecodedKB(document=document, migrated_from=None)


@contextmanager
def _collector_paused() -> Iterator[None]:
    # A large KB becomes ~10^5 objects at once; the cyclic collector would rescan them over and over while
    # they are built (doubling the load time), and none of them is garbage yet.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _decode_carefully(path: Path, raw: bytes) -> DecodedKB:
    data = _parse_json(path, raw)
    version = schema_version_of(data)
    problem = _version_problem(data, version)
    if problem is not None:
        raise KBFileError(path, problem)
    if version != SCHEMA_VERSION:
        data = _validated(path, migrate_to_current, data)
    _check_layouts(path, data)
    document = _validated(path, KBDocument.model_validate, data)
    return DecodedKB(document=document, migrated_from=None if version == SCHEMA_VERSION else version)


def _version_problem(data: dict[str, Any], version: object) -> str | None:
    """Why a parsed file's schema version cannot be read, in words; None when it can."""
    if not isinstance(version, bool) and version in READABLE_VERSIONS:
        return None
    readable = ", ".join(map(str, READABLE_VERSIONS[:-1])) + f" and {READABLE_VERSIONS[-1]}"
    if not data:
        return "it is an empty JSON object ({}), not a KB: export one with `kernelblaster kb export`"
    if version is None:
        return ("it names no schema version (a KB file starts with a `schema_version` field), so it is not a "
                "KernelBlaster KB, or not all of one")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        return (f"it is written in KB schema version {version}, newer than this kernelblaster reads (versions "
                f"{readable}): upgrade kernelblaster to read it")
    return f"its schema version {version!r} is not one this kernelblaster reads (versions {readable})"


def encode(document: KBDocument) -> bytes:
    """The document as JSON with one record per line (a technique, a state's header, an optimization, a
    transition, a run's applied steps) and default values left out: readable and diffable, yet compact
    and fast to write, which an indented dump of a large KB is not."""
    text = document.model_dump_json(exclude_defaults=True)
    for key in _TOP_LEVEL_KEYS:
        text = text.replace(f',"{key}":', f',\n"{key}":', 1)
    for marker, indent in _RECORDS:
        text = text.replace(marker, f"\n{indent}{marker}")
    for marker, indent in _KEYED_RECORDS:
        text = _break_before_keys(text, marker, indent)
    records, steps_key, runs = text.partition(_STEPS_KEY)
    text = records + steps_key + _break_before_keys(runs, _RUN_MARKER, "  ")
    return (text[:-1] + "\n}\n").encode()


def _break_before_keys(text: str, marker: str, indent: str) -> str:
    """Start a new line before each object key whose value begins with `marker`, e.g. `:{"id":`."""
    pieces = text.split(marker)
    for number, piece in enumerate(pieces[:-1]):
        # The piece ends with the key, `"name"`; ids and run ids never contain a quote.
        key_start = piece.rfind('"', 0, len(piece) - 1)
        pieces[number] = f"{piece[:key_start]}\n{indent}{piece[key_start:]}"
    return marker.join(pieces)


def _parse_json(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except UnicodeDecodeError as error:
        raise KBFileError(path, f"not UTF-8 text (byte {error.start})") from None
    except json.JSONDecodeError as error:
        # json's messages for control characters end in " at", meant to be followed by the position.
        reason = error.msg.removesuffix(" at")
        raise KBFileError(path, f"not valid JSON at line {error.lineno} column {error.colno}: {reason}") from None
    except RecursionError:
        raise KBFileError(path, "nested too deeply to be a KB (a KB file is a few levels deep)") from None
    if not isinstance(data, dict):
        raise KBFileError(path, f"expected a JSON object at the top level, found {type(data).__name__}")
    return data


def _check_layouts(path: Path, data: dict[str, Any]) -> None:
    for key, expected, consequence in _LAYOUTS:
        fields = data.get(key)
        if fields != list(expected):
            raise KBFileError(
                path,
                f"{key} {_summarise_layout(fields)} differ from this version's layout "
                f"({len(expected)} fields, {expected[0]} ... {expected[-1]}); {consequence}",
            )


def _summarise_layout(fields: Any) -> str:
    if not isinstance(fields, list) or not fields:
        return f"= {fields!r}"
    return f"({len(fields)} fields, {fields[0]} ... {fields[-1]})"


def _validated(path: Path, validate: Callable[[dict[str, Any]], _Parsed], data: dict[str, Any]) -> _Parsed:
    try:
        return validate(data)
    except ValidationError as error:
        raise KBFileError(path, describe_validation_error(error)) from None


def describe_validation_error(error: ValidationError) -> str:
    """The first problem pydantic found, with its location, and how many more there are."""
    problems = error.errors(include_url=False)
    first = problems[0]
    location = format_location(first["loc"]) or "top level"
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return f"invalid at {location}: {first['msg']}{more}"


def format_location(loc: tuple[int | str, ...]) -> str:
    """A pydantic location as a path a reader can follow: `states.memory_bound.optimizations[2].stats`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
