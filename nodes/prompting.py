"""Prompts as text files beside the nodes: `prompts/<name>.system.txt` and `prompts/<name>.user.txt`.

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
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from string import Template

from kernelblaster.graph.agents import Question, T
from kernelblaster.graph.context import Role

STATIC_FIELDS = frozenset({"pytorch_source", "problem", "header", "allowed_libraries", "precision", "catalogue",
                           "gpu", "targets", "starting_point"})


@dataclass(frozen=True)
class Prompt:
    system: str
    user: Template

    def question(self, *, role: Role, node: str, key: str, schema: type[T],
                 check: Callable[[T], str | None] | None = None, **fields: object) -> Question[T]:
        return Question(role=role, node=node, key=key, schema=schema, system=self.system,
                        user=self.user.substitute({name: str(value) for name, value in fields.items()}), check=check)


@functools.cache
def load_prompt(name: str) -> Prompt:
    folder = resources.files("kernelblaster.nodes").joinpath("prompts")
    user = Template(folder.joinpath(f"{name}.user.txt").read_text())
    check_static_first(name, user)
    return Prompt(system=folder.joinpath(f"{name}.system.txt").read_text().strip(), user=user)


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
