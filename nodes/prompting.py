"""Prompts as text files beside the nodes: `prompts/<name>.system.txt` and `prompts/<name>.user.txt`, and
fragments that nodes fill in (`prompt_file`), among them the one candidate contract (`contract.txt`) that the
system part of every CUDA-writing prompt shows in place of `${contract}`; and the limits of an answer schema,
stated in words for the prompt (`answer_limits`).

The user part is a `string.Template`: `${field}` is filled from the node's values, and a missing field is
an error, not a silently empty hole. CUDA and JSON braces in the text need no escaping.

Every prompt is ordered static-first, so that provider-side prefix caching applies across the steps of
one problem: the system part (role instructions, the candidate contract), then the fields that are the
same for every prompt of a run (`STATIC_FIELDS`: the problem source, the header, the GPU, the precision
contract, the targets, ...), then the fields that vary. A template with a static field after a varying
one is refused when it is loaded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from string import Template
from typing import Any

from pydantic import BaseModel

from kernelblaster.graph.llm.agents import Question, T
from kernelblaster.graph.llm.roles import Role

STATIC_FIELDS = frozenset({"pytorch_source", "problem", "header", "allowed_libraries", "precision", "catalogue",
                           "gpu", "targets", "rows", "starting_point", "arithmetic"})


@dataclass(frozen=True)
class Prompt:
    system: str
    user: Template

    def question(self, *, role: Role, node: str, key: str, schema: type[T],
                 check: Callable[[T], str | None] | None = None, **fields: object) -> Question[T]:
        return Question(role=role, node=node, key=key, schema=schema, system=self.system,
                        user=self.user.substitute({name: str(value) for name, value in fields.items()}), check=check)


@functools.cache
def prompt_file(file_name: str) -> str:
    """The text of `prompts/<file_name>` beside the nodes."""
    return resources.files("kernelblaster.nodes").joinpath("prompts", file_name).read_text()


# The candidate contract, in one file, for every prompt whose system part names `${contract}`.
CONTRACT_FILE = "contract.txt"


@functools.cache
def load_prompt(name: str) -> Prompt:
    user = Template(prompt_file(f"{name}.user.txt"))
    check_static_first(name, user)
    system = prompt_file(f"{name}.system.txt").strip().replace("${contract}", prompt_file(CONTRACT_FILE).strip())
    return Prompt(system=system, user=user)


def check_static_first(name: str, template: Template) -> None:
    """Raise if a static field of `template` comes after a varying one (it would break the cached prefix)."""
    fields = [match.group("named") or match.group("braced") for match in template.pattern.finditer(template.template)]
    varying = next((field for field in fields if field and field not in STATIC_FIELDS), None)
    if varying is None:
        return
    late = [field for field in fields[fields.index(varying):] if field in STATIC_FIELDS]
    if late:
        raise ValueError(f"prompt {name}: the static field ${{{late[0]}}} comes after the varying ${{{varying}}}; "
                         "put the fields that are the same for the whole run first")


def answer_limits(schema: type[BaseModel]) -> str:
    """The size limits of `schema`'s fields in words, one line per field and limit, so that a model keeps them
    the first time (an answer outside them is refused and asked for again); empty when there are none."""
    definitions = schema.model_json_schema().get("$defs", {})
    fields: dict[str, list[str]] = {}
    for field, limit in _limits(schema.model_json_schema(), "", definitions):
        places = fields.setdefault(limit, [])
        if field not in places:
            places.append(field)
    if not fields:
        return ""
    lines = [f"- {', '.join(places)}: {limit}" for limit, places in fields.items()]
    return "Limits of the answer (an answer outside them is refused and asked for again):\n" + "\n".join(lines)


def _limits(node: dict[str, Any], field: str, definitions: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, limit) pairs of a JSON schema node and everything under it; a field inside an object with a
    constant `kind` is named after that kind (`lesson (add_lesson)`)."""
    if "$ref" in node:
        yield from _limits(definitions[node["$ref"].rsplit("/", 1)[-1]], field, definitions)
        return
    for option in node.get("anyOf", []) + node.get("oneOf", []):
        yield from _limits(option, field, definitions)
    limit = _limit(node)
    if limit:
        yield field, limit
    kind = node.get("properties", {}).get("kind", {}).get("const")
    for name, child in node.get("properties", {}).items():
        yield from _limits(child, f"{name} ({kind})" if kind else name, definitions)
    if "items" in node:
        yield from _limits(node["items"], f"each of {field}", definitions)


def _limit(node: dict[str, Any]) -> str:
    parts = [_range(node.get("minLength"), node.get("maxLength"), "characters"),
             _range(node.get("minItems"), node.get("maxItems"), "items"),
             _range(node.get("minimum"), node.get("maximum"), "")]
    if "pattern" in node:
        parts.append(f"matching {node['pattern']}")
    return ", ".join(part for part in parts if part)


def _range(low: float | None, high: float | None, unit: str) -> str:
    text = (f"{low} to {high}" if low is not None and high is not None else f"at most {high}" if high is not None
            else f"at least {low}" if low is not None and low > 0 else "")
    if text.endswith(" 1") and unit:
        unit = unit.removesuffix("s")
    return f"{text} {unit}".strip() if text else ""
