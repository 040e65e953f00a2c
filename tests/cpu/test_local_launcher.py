"""A suite's task processes see the GPU they were given, numbered as the runner numbers devices."""

from __future__ import annotations

import os

import pytest
from pydantic import BaseModel

from kernelblaster.eval.local_launcher import Finished, LocalLauncher, only_device, visible_entries
from kernelblaster.tools.errors import UserFacingError


class Seen(BaseModel):
    visible: str


def report_visible_devices(job: BaseModel, services: object, report: object, slot: str) -> Seen:
    return Seen(visible=os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))


def test_without_an_inherited_list_a_task_sees_its_gpu_by_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert only_device(3) == "3"


def test_under_an_inherited_list_a_task_sees_that_lists_entry_for_its_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert (only_device(0), only_device(1)) == ("2", "3")


def test_device_uuids_in_the_inherited_list_are_passed_on_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-40f16c09-fe75,GPU-b8d02ea2-3ea7")
    assert only_device(1) == "GPU-b8d02ea2-3ea7"


@pytest.mark.parametrize(("value", "shown"), [("0,,1", ["0"]), ("0,1,-1,2", ["0", "1"]), ("0,0,1", []),
                                              ("", []), (" 3 , 5", ["3", "5"])])
def test_an_inherited_list_is_read_as_cuda_reads_it(value: str, shown: list[str]) -> None:
    assert visible_entries(value) == shown


def test_a_gpu_beyond_the_inherited_list_is_refused_naming_the_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with pytest.raises(UserFacingError, match=r"GPU 2 is not among the 2 devices CUDA_VISIBLE_DEVICES='4,5'"):
        LocalLauncher((0, 2), services_factory=object)  # type: ignore[arg-type]


def test_a_task_process_runs_with_the_inherited_entry_of_its_gpu_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    launcher = LocalLauncher((1,), services_factory=object)  # type: ignore[arg-type]
    assert launcher.start(0, report_visible_devices, Seen(visible="")) == "gpu1"
    finished = [message for message in launcher.wait(timeout=60) if isinstance(message, Finished)]
    assert [message.result for message in finished] == [Seen(visible="7")]
