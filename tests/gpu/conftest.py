"""What the GPU tests share: one compile and baseline cache for the session (the test driver is compiled once)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kernelblaster-cache")
