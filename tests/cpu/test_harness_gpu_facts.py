"""harness/gpu_facts.py: the capabilities beyond one block (clusters, distributed shared memory, cooperative
launch) and the toolkit, by arch where no GPU is asked, and as the GPU reports them where one is."""

from __future__ import annotations

import shutil

import pytest

from kernelblaster.harness import gpu_facts
from kernelblaster.harness.gpu_facts import capability_facts, read_capabilities, toolkit_release


def test_hopper_has_clusters_of_eight_distributed_shared_memory_and_cooperative_launch() -> None:
    facts = capability_facts("sm_90a")
    assert (facts.clusters, facts.portable_cluster_size, facts.distributed_shared_memory) == (True, 8, True)
    assert facts.cooperative_launch and facts.max_blocks_per_sm == 32


def test_ampere_has_cooperative_launch_but_no_clusters() -> None:
    facts = capability_facts("sm_80")
    assert (facts.clusters, facts.portable_cluster_size, facts.distributed_shared_memory) == (False, 1, False)
    assert facts.cooperative_launch


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_toolkit_release_is_read_from_nvcc() -> None:
    release = toolkit_release()
    assert release is not None and release.count(".") == 2 and release.split(".")[0].isdigit()


def test_what_the_gpu_reports_overrides_the_arch_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_facts, "device_attributes", lambda device, attributes: [1, 24, 0])
    monkeypatch.setattr(gpu_facts, "driver_version", lambda: "13.0")
    facts = read_capabilities(0, "sm_90")
    assert (facts.cooperative_launch, facts.max_blocks_per_sm, facts.clusters, facts.portable_cluster_size) == (
        True, 24, False, 1)
    assert facts.driver == "13.0"


def test_without_the_driver_library_the_arch_table_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_facts, "device_attributes", lambda device, attributes: None)
    assert read_capabilities(0, "sm_90") == capability_facts("sm_90")
