"""Shared test configuration: GPU tests carry the `gpu` marker and skip cleanly on a machine without one;
the `sandbox` fixture is the OS sandbox candidates are built and run in (a test that needs it fails, saying
why, where the sandbox cannot start: the property it checks is not there)."""

from __future__ import annotations

import shutil

import pytest

from kernelblaster.tools.sandbox import Sandbox, probe_sandbox


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and shutil.which("nvcc") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and nvcc (run `pytest -m gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    probed = probe_sandbox()
    if isinstance(probed, str):
        pytest.fail(f"the OS sandbox is unavailable on this machine: {probed}")
    return probed
