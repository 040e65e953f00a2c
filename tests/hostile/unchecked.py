"""The build with its rules switched off: what the sandbox and the harness make of a candidate the rules would
refuse (the rules are the readable early warning for the agents, not the boundary)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from kernelblaster.harness import build
from kernelblaster.harness.static_check import StaticViolation


def _none(*_args: object, **_kwargs: object) -> list[StaticViolation]:
    return []


@contextmanager
def rules_switched_off() -> Iterator[None]:
    """Inside, `build_candidate` compiles and links without the source, assembly and object rules (the compile
    sandbox and its check of the files read stay)."""
    with pytest.MonkeyPatch.context() as patch:
        for rule in ("check_source", "host_assembly_violations", "check_object", "check_library"):
            patch.setattr(build, rule, _none)
        yield
