"""The compile cache and the folders `bench` writes to: a damaged cache entry is compiled again, and a cache or
an --out that cannot be a folder (a file, /proc, a folder of other files) is one line and exit 2, with nothing
written and nothing run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from fixtures.cli import folder_picture, kernelblaster
from fixtures.graph.recorded_evaluator import EvaluationLog
from fixtures.suite.scripted_suite import KERNELBENCH, services_factory, suite_config

from kernelblaster.eval import baseline, runner
from kernelblaster.eval.problems import select_problems
from kernelblaster.eval.results import DATABASE_NAME
from kernelblaster.eval.runner import start_suite
from kernelblaster.eval.suite import LOCK_NAME
from kernelblaster.tools.nvcc import CompileResult, compile_object
from kernelblaster.tools.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "examples" / "problems" / "elementwise_swish_scale.py"
NAIVE = ROOT / "examples" / "candidates" / "elementwise_swish_scale" / "naive.cu"
FIXTURES = ROOT / "tests" / "fixtures" / "candidates"
DRIVER_DIR = ROOT / "harness" / "driver"

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@pytest.fixture
def locked(tmp_path: Path) -> Path:
    """A read-only folder; the test is skipped where this user writes into it anyway (root)."""
    folder = tmp_path / "locked"
    folder.mkdir(mode=0o555)
    if os.access(folder, os.W_OK):
        pytest.skip("this user writes into read-only folders")
    return folder


def _compile(output: Path, cache: Path, sandbox: Sandbox) -> CompileResult:
    return compile_object(FIXTURES / "scale_ok.cu", output, arch="sm_90", include_dirs=[FIXTURES, DRIVER_DIR],
                          cache_dir=cache, sandbox=sandbox)


def _damage(cache: Path, suffix: str) -> None:
    [entry] = cache.glob(f"*{suffix}")
    entry.write_bytes(b"garbage \xff, not what the cache wrote")


@needs_nvcc
@pytest.mark.parametrize("suffix", [".json", ".o"])
def test_a_damaged_cache_entry_is_a_miss_compiled_again_and_replaced(tmp_path: Path, sandbox: Sandbox,
                                                                     suffix: str) -> None:
    cache = tmp_path / "cache"
    first = _compile(tmp_path / "a.o", cache, sandbox)
    _damage(cache, suffix)

    again = _compile(tmp_path / "b.o", cache, sandbox)

    assert again.ok and not again.cached and again.kernels == first.kernels
    [result] = cache.glob("*.json")
    assert CompileResult.model_validate_json(result.read_bytes()).ok
    assert _compile(tmp_path / "c.o", cache, sandbox).cached  # the entry was replaced


@needs_nvcc
@pytest.mark.skipif(torch.cuda.is_available(), reason="specifies eval without a GPU")
def test_eval_over_a_damaged_cache_entry_compiles_again_without_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELBLASTER_CACHE", str(tmp_path))
    kernelblaster(capsys, "eval", PROBLEM, NAIVE)
    for entry in (tmp_path / "objects").glob("*.json"):
        entry.write_text("garbage")

    finished = kernelblaster(capsys, "eval", PROBLEM, NAIVE)

    assert finished.status == 5 and "no_gpu: compiled" in finished.error_line
    assert all(CompileResult.model_validate_json(entry.read_bytes()).ok
               for entry in (tmp_path / "objects").glob("*.json"))


@pytest.mark.parametrize(("cache", "complaint"), [
    ("file", "cannot be created: {tmp}/file is a file"),
    ("file/inside", "cannot be created: {tmp}/file is a file"),
    ("/proc/x", "cannot be created (No such file or directory)"),
])
def test_a_cache_that_cannot_be_a_folder_is_one_line_naming_the_variable(
        cache: str, complaint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("mine")
    chosen = tmp_path / cache
    monkeypatch.setenv("KERNELBLASTER_CACHE", str(chosen))
    before = folder_picture(tmp_path)

    finished = kernelblaster(capsys, "eval", PROBLEM, NAIVE)

    assert finished.status == 2
    assert finished.error_line.startswith(f"KERNELBLASTER_CACHE={chosen}: the cache folder {chosen}/builds/")
    assert finished.error_line.endswith(complaint.format(tmp=tmp_path))
    assert folder_picture(tmp_path) == before


# -- bench report --out ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("suite") / "suite"
    start_suite(root, suite_config(select_problems(KERNELBENCH, [1], {19}), window=1, gpus=(0,)), services_factory())
    return root


@pytest.mark.parametrize(("out", "complaint"), [
    ("file", "the report folder {tmp}/file is a file"),
    ("file/report", "the report folder {tmp}/file/report cannot be created: {tmp}/file is a file"),
    ("/proc/x", "cannot write the report to /proc/x (No such file or directory)"),
])
def test_a_report_out_that_cannot_be_a_folder_is_one_line_and_writes_nothing(
        out: str, complaint: str, finished_suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("mine")
    before, suite_before = folder_picture(tmp_path), folder_picture(finished_suite)

    finished = kernelblaster(capsys, "bench", "report", finished_suite, "--out", tmp_path / out)

    assert finished.status == 2 and finished.error_line == complaint.format(tmp=tmp_path)
    assert folder_picture(tmp_path) == before and folder_picture(finished_suite) == suite_before


def test_a_report_out_in_a_read_only_folder_is_one_line_and_writes_nothing(
        finished_suite: Path, locked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    finished = kernelblaster(capsys, "bench", "report", finished_suite, "--out", locked / "report")

    assert finished.status == 2 and finished.error_line.endswith(f"cannot be created: {locked} is not writable")
    assert list(locked.iterdir()) == []


# -- bench run / baseline --out ----------------------------------------------------------------------------
@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch, recorded_harness: EvaluationLog) -> None:
    """`bench run` and `bench baseline` get past their checks of the machine (endpoint, GPU), and fail the test
    if a suite or a baseline starts."""
    def must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("a refused --out ran anyway")

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(runner, "_run", must_not_run)
    monkeypatch.setattr(baseline, "_measure_all", must_not_run)


def _bench(capsys: pytest.CaptureFixture[str], command: str, out: Path) -> str:
    finished = kernelblaster(capsys, "bench", command, KERNELBENCH, "--level", "1", "--out", out,
                             *(("--memory", "fresh") if command == "run" else ()))
    assert finished.status == 2
    return finished.error_line


@pytest.mark.parametrize("command", ["run", "baseline"])
def test_a_bench_out_that_is_a_file_is_one_line_and_writes_nothing(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_runs: None) -> None:
    (tmp_path / "file").write_text("mine")
    assert _bench(capsys, command, tmp_path / "file") == f"the directory {tmp_path}/file is a file"
    assert folder_picture(tmp_path) == {"file": ((tmp_path / "file").lstat().st_mode, b"mine")}


@pytest.mark.parametrize("command", ["run", "baseline"])
def test_a_bench_out_where_nothing_can_be_created_is_one_line(
        command: str, capsys: pytest.CaptureFixture[str], nothing_runs: None) -> None:
    assert _bench(capsys, command, Path("/proc/x")) == \
        "the directory /proc/x cannot be used (No such file or directory)"


@pytest.mark.parametrize("command", ["run", "baseline"])
def test_a_bench_out_in_a_read_only_folder_is_one_line_and_writes_nothing(
        command: str, locked: Path, capsys: pytest.CaptureFixture[str], nothing_runs: None) -> None:
    assert _bench(capsys, command, locked / "out").endswith(f"cannot be created: {locked} is not writable")
    assert list(locked.iterdir()) == []


def test_bench_run_into_a_folder_of_other_files_is_refused_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_runs: None) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    before = folder_picture(tmp_path)
    assert _bench(capsys, "run", tmp_path).startswith(f"the directory {tmp_path} is not empty and holds no suite")
    assert folder_picture(tmp_path) == before


def test_a_folder_holding_only_a_runner_lock_left_behind_still_takes_a_suite(tmp_path: Path) -> None:
    root = tmp_path / "suite"
    root.mkdir()
    (root / LOCK_NAME).write_text("12345")
    start_suite(root, suite_config(select_problems(KERNELBENCH, [1], {19}), window=1, gpus=(0,)), services_factory())
    assert (root / DATABASE_NAME).is_file()
