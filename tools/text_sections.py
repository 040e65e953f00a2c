"""Text files of named `string.Template` sections, for prose that code fills in piece by piece (the ncu
findings the agents read, the facts sections of the agents' prompts).

A section starts at a `[name]` line and runs to the next one, without the blank lines around it; leading
spaces count; anything before the first section explains the file. When a section is filled, a line using
a field whose value is None is left out, so optional facts need no branches in the code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from string import Template

_SECTION_HEADER = re.compile(r"^\[([a-z ,]+)\]$", re.MULTILINE)


@dataclass(frozen=True)
class TextSections:
    """The sections of one text file, by name."""

    file_name: str
    sections: dict[str, Template]

    @classmethod
    def parse(cls, file_name: str, text: str) -> TextSections:
        parts = _SECTION_HEADER.split(text)[1:]
        return cls(file_name, {name: Template(body.strip("\n"))
                               for name, body in zip(parts[::2], parts[1::2], strict=True)})

    def fill(self, section: str, **fields: str | None) -> str:
        """The section with its fields filled in; a line using a field whose value is None is left out."""
        lines = []
        for line in self.sections[section].template.splitlines():
            used = {found.group("named") or found.group("braced")
                    for found in Template.pattern.finditer(line) if not found.group("escaped")}
            unknown = used - fields.keys()
            if unknown:
                raise ValueError(f"{self.file_name} [{section}] uses ${{{sorted(unknown)[0]}}}, which it is not "
                                 f"given (its fields: {', '.join(sorted(fields))})")
            if all(fields[name] is not None for name in used):
                lines.append(Template(line).substitute(fields))
        return "\n".join(lines)
