"""Finding ncu, building the profiling command, and running `ncu --import` (with stand-in ncu scripts)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from kernelblaster.tools import ncu, toolkit
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.ncu import (
    DEFAULT_SECTIONS,
    NcuFailedError,
    NcuUnavailableError,
    check_ncu_run,
    export_details,
    locate_ncu,
    profile_command,
)
from kernelblaster.tools.toolkit import ToolUnavailable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"


@pytest.fixture
def no_ncu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A machine without ncu: nothing on PATH, no CUDA_HOME, an empty default toolkit directory."""
    monkeypatch.delenv(ncu.NCU_ENV_VAR, raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(toolkit, "DEFAULT_CUDA_HOME", tmp_path / "no-cuda")


def _stand_in_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """An executable shell script used as ncu through KERNELBLASTER_NCU; it records its arguments."""
    script = tmp_path / "ncu"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/args"\n{body}\n')
    script.chmod(0o755)
    monkeypatch.setenv(ncu.NCU_ENV_VAR, str(script))
    return script


@pytest.mark.usefixtures("no_ncu")
def test_missing_ncu_is_reported_as_unavailable() -> None:
    located = locate_ncu()
    assert isinstance(located, ToolUnavailable)
    assert "ncu not found" in located.reason and ncu.NCU_ENV_VAR in located.reason


@pytest.mark.usefixtures("no_ncu")
def test_building_a_command_without_ncu_raises_unavailable(tmp_path: Path) -> None:
    with pytest.raises(NcuUnavailableError) as raised:
        profile_command(["./driver"], tmp_path / "report")
    assert isinstance(raised.value, UserFacingError)
    assert "ncu not found" in raised.value.unavailable.reason


@pytest.mark.usefixtures("no_ncu")
def test_ncu_in_the_default_toolkit_directory_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cuda_home = tmp_path / "cuda"
    (cuda_home / "bin").mkdir(parents=True)
    binary = cuda_home / "bin" / "ncu"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setattr(toolkit, "DEFAULT_CUDA_HOME", cuda_home)
    assert locate_ncu() == binary


def test_environment_variable_naming_a_missing_file_is_an_error(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv(ncu.NCU_ENV_VAR, str(tmp_path / "nowhere" / "ncu"))
    with pytest.raises(UserFacingError, match="is not an executable file"):
        locate_ncu()


def test_profile_command_wraps_the_program(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    script = _stand_in_ncu(tmp_path, monkeypatch, "exit 0")
    command = profile_command(["./driver", "--mode", "profile"], tmp_path / "cand")
    assert command[0] == str(script)
    assert command[-3:] == ["./driver", "--mode", "profile"]
    joined = shlex.join(command)
    for flags in ("--target-processes all", "--profile-from-start off", "--clock-control none",
                  f"--export {tmp_path / 'cand.ncu-rep'} -f"):
        assert flags in joined
    assert [command[i + 1] for i, arg in enumerate(command) if arg == "--section"] == list(DEFAULT_SECTIONS)


def test_profile_command_takes_other_sections(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _stand_in_ncu(tmp_path, monkeypatch, "exit 0")
    command = profile_command(["./driver"], tmp_path / "r.ncu-rep", sections=["SpeedOfLight"])
    assert [command[i + 1] for i, arg in enumerate(command) if arg == "--section"] == ["SpeedOfLight"]
    assert str(tmp_path / "r.ncu-rep") in command


def test_export_details_returns_ncu_csv_and_asks_for_the_details_page(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    _stand_in_ncu(tmp_path, monkeypatch, f'cat "{FIXTURES / "details_rules.csv"}"')
    report = tmp_path / "cand.ncu-rep"
    report.write_bytes(b"")
    text = export_details(tmp_path / "cand")
    assert text == (FIXTURES / "details_rules.csv").read_text()
    args = (tmp_path / "args").read_text().split("\n")
    assert args[:2] == ["--import", str(report)]
    assert {"--csv", "details", "base", "all", "--print-rule-details"} <= set(args)


def test_export_of_missing_report_names_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _stand_in_ncu(tmp_path, monkeypatch, "exit 0")
    with pytest.raises(UserFacingError, match=r"report .*absent\.ncu-rep does not exist"):
        export_details(tmp_path / "absent")


def test_failing_ncu_raises_with_its_error_and_output_tail(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    _stand_in_ncu(tmp_path, monkeypatch,
                  'echo "loading report" ; echo "==ERROR== Failed to load report: bad magic" >&2 ; exit 3')
    (tmp_path / "cand.ncu-rep").write_bytes(b"junk")
    with pytest.raises(NcuFailedError) as raised:
        export_details(tmp_path / "cand.ncu-rep")
    message = str(raised.value)
    assert message.startswith("ncu exited with status 3: Failed to load report: bad magic")
    assert "loading report" in message


def test_export_that_outlives_its_timeout_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _stand_in_ncu(tmp_path, monkeypatch, "exec sleep 5")
    (tmp_path / "cand.ncu-rep").write_bytes(b"")
    with pytest.raises(NcuFailedError, match=r"took longer than 0\.2 s"):
        export_details(tmp_path / "cand.ncu-rep", timeout_s=0.2)


def test_profiling_run_without_counter_permission_fails_clearly() -> None:
    output = ("==PROF== Connected to process 632\n"
              "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
              "Performance Counters on the target device 0.\n")
    with pytest.raises(NcuFailedError, match="status 0: ERR_NVGPUCTRPERM"):
        check_ncu_run(0, output)


def test_profiling_run_that_profiled_nothing_fails() -> None:
    with pytest.raises(NcuFailedError, match="profiled no kernels"):
        check_ncu_run(0, "==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\n")


def test_clean_profiling_run_passes() -> None:
    check_ncu_run(0, "==PROF== Connected to process 632\n==PROF== Report: /tmp/cand.ncu-rep\n")
