"""Errors the knowledge base raises for input it can name: a broken KB file, an unknown state or technique."""

from __future__ import annotations

from pathlib import Path

from kernelblaster.tools.errors import UserFacingError


class KBFileError(UserFacingError):
    """A KB file that cannot be used as it is: unreadable, not JSON, not the schema, another layout."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"KB file {path}: {problem}")
        self.path = path
        self.problem = problem


class KBLookupError(UserFacingError):
    """A reference to a state or technique that the KB does not hold."""
