"""Load a manifest module of tests/ by its path: tests/ is no package, and test folders do not see each other."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTS_DIR = Path(__file__).resolve().parent


def load_manifest(relative_path: str) -> ModuleType:
    """The module at tests/`relative_path`, registered in sys.modules first (dataclasses need it)."""
    path = TESTS_DIR / relative_path
    spec = importlib.util.spec_from_file_location(f"kernelblaster_tests_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
