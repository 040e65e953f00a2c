"""Prompts as text files beside the nodes: `prompts/<name>.system.txt` and `prompts/<name>.user.txt`.

The user part is a `string.Template`: `${field}` is filled from the node's values, and a missing field is
an error, not a silently empty hole. CUDA and JSON braces in the text need no escaping.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from string import Template

from kernelblaster.graph.agents import Question, T
from kernelblaster.graph.context import Role


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
    return Prompt(system=folder.joinpath(f"{name}.system.txt").read_text().strip(),
                  user=Template(folder.joinpath(f"{name}.user.txt").read_text()))
