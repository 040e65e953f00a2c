"""tools/options.py's comma-separated flag values: an empty value is an empty list, an empty item a mistake."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from kernelblaster.tools.options import GpuIndices, Libraries


def test_an_empty_allow_value_allows_no_library() -> None:
    assert TypeAdapter(Libraries).validate_python("") == ()


def test_an_empty_gpus_value_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least 1 item"):
        TypeAdapter(GpuIndices).validate_python("")


@pytest.mark.parametrize("value", ["0,,1", "0,", ",0"])
def test_an_empty_item_in_gpus_is_refused_naming_it(value: str) -> None:
    with pytest.raises(ValidationError, match=r"item \d is empty; separate items with single commas"):
        TypeAdapter(GpuIndices).validate_python(value)
