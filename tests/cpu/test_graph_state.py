"""The updates nodes return name exactly the fields of the state they update, with the same types, so the
type checker catches a misspelt key that LangGraph would drop without a word."""

from __future__ import annotations

from dataclasses import fields
from typing import get_type_hints

import pytest

from kernelblaster.graph.core import state as graph_state
from kernelblaster.graph.core.state import OptimizationState, RunUpdate, TrajectoryState, TrajectoryUpdate


@pytest.mark.parametrize(("update", "state"), [(RunUpdate, OptimizationState), (TrajectoryUpdate, TrajectoryState)])
def test_an_update_names_every_field_of_its_state_and_nothing_else(update: type, state: type) -> None:
    assert set(update.__annotations__) == {field.name for field in fields(state)}


@pytest.mark.parametrize(("update", "state"), [(RunUpdate, OptimizationState), (TrajectoryUpdate, TrajectoryState)])
def test_an_update_gives_each_field_the_type_of_its_state(update: type, state: type) -> None:
    namespace = vars(graph_state)
    declared = get_type_hints(state, globalns=namespace)
    # Reducer annotations (Annotated[T, reducer]) reduce to T without include_extras.
    assert get_type_hints(update, globalns=namespace) == {name: declared[name] for name in update.__annotations__}
