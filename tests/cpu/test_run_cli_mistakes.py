"""`optimize`, `resume`, `answer`, `runs`, `report`: every mistake is one line with nothing created or
changed, a run directory is self-contained, locked and never written over when damaged (issue 9, items
2, 3, 4, 5, 8 and 10).

The harness is the recorded stand-in (no GPU here) except where the test is about the GPU being missing;
runs use `--llm human`, which needs no endpoint. Everything else — CLI, API, graph, SQLite checkpoints,
KB — is real.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import stat
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
import torch
from fixtures import sanitizer_stand_in
from fixtures.cli import Finished, folder_picture, kernelblaster
from fixtures.graph.recorded_evaluator import EvaluationLog
from fixtures.graph.scenario import (
    PROBLEM,
    applies_first_offered,
    chat_models,
    initial_kernel,
    kernel,
    run_dir_of,
    services_for,
    small_context,
)

from kernelblaster.graph.app import api
from kernelblaster.graph.core import services
from kernelblaster.graph.core.run_files import RunFiles
from kernelblaster.harness import requirements
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.toolkit import ToolUnavailable


@pytest.fixture(autouse=True)
def in_a_fresh_directory(fresh_cli_directory: Path) -> None:
    KnowledgeBase.create(fresh_cli_directory / "kb.json")
    (fresh_cli_directory / "empty.cu").write_text("")


def optimize(capsys: pytest.CaptureFixture[str], *flags: str, run_dir: str = "run") -> Finished:
    return kernelblaster(capsys, "optimize", PROBLEM, "--llm", "human", "--kb", "kb.json", "--iterations", "1",
                         "--trajectories", "1", "--depth", "1", "--run-dir", run_dir, *flags)


@pytest.fixture
def waiting_run(tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> Path:
    """A `--llm human` run waiting for its first answer (the initial CUDA)."""
    assert optimize(capsys).status == 0
    return tmp_path / "run"


# ---- item 2: optimize checks every flag as eval does, before anything is created --------------------------


@pytest.mark.parametrize(("flags", "complaint"), [
    (["--allow", "numpy"], "--allow numpy: unknown library 'numpy'; choose from cublas, "),
    (["--base-url", "notaurl"], "--base-url notaurl: expected an http:// or https:// URL"),
    (["--init", "empty.cu"], "the --init CUDA file empty.cu is empty"),
    (["--init", "missing.cu"], "the --init CUDA file missing.cu does not exist"),
    (["--gpus", "0,0"], "--gpus 0,0: lists 0 more than once"),
    (["--gpus", "-1"], "--gpus -1: input should be greater than or equal to 0"),
    (["--gpus", "0,,1"], "--gpus 0,,1: item 2 is empty; separate items with single commas"),
    (["--allow", "cublas,,"], "--allow cublas,,: item 2 is empty; separate items with single commas"),
    (["--depth", "0"], "--depth 0: input should be greater than or equal to 1"),
    (["--iterations", "many"], "--iterations many: input should be a valid integer"),
    (["--role-model", "lowering"], "--role-model: expected KEY=VALUE, got 'lowering'"),
    (["--role-model", "nobody=big"], "--role-model nobody: input should be 'lowering', "),
    (["--llm", "robot"], "--llm robot: input should be 'openai', 'human' or 'replay'"),
    (["--llm-timeout", "inf"], "--llm-timeout inf: input should be a finite number"),
    (["--llm-timeout", "1e9"], "--llm-timeout 1e9: input should be less than or equal to 604800"),
    (["--temperature", "nan"], "--temperature nan: input should be a finite number"),
    (["--max-concurrent-requests", "0"], "--max-concurrent-requests 0: input should be greater than or equal to 1"),
    (["--precision", "fp8"], "--precision fp8: input should be 'strict', 'tf32', 'fp16' or 'pytorch-default'"),
    (["--sanitize", "memchek"], "--sanitize memchek: input should be 'memcheck', 'racecheck' or 'initcheck'"),
    (["--sanitize", ""], "--sanitize '': name at least one checker: memcheck, racecheck, initcheck"),
    (["--model", ""], "--model '': string should have at least 1 character"),
    (["--kb", ""], "--kb '': an empty path; leave the flag out to use the default"),
    (["--kb", "empty.cu"], "KB file "),
    (["--kb", "."], "KB file .: is a directory, not a file"),
    (["--kb", "nowhere/kb.json"], "KB file nowhere/kb.json: does not exist (create a new KB there with "),
])
def test_a_bad_optimize_flag_is_one_line_and_creates_nothing(
        flags: list[str], complaint: str, tmp_path: Path, recorded_harness: EvaluationLog,
        capsys: pytest.CaptureFixture[str]) -> None:
    before = folder_picture(tmp_path)
    finished = optimize(capsys, *flags)
    assert finished.status == 2
    assert finished.error_line.startswith(complaint)
    assert folder_picture(tmp_path) == before
    assert recorded_harness.calls == []


@pytest.mark.parametrize(("mistake", "complaint"), [
    ("def get_inputs():\n    raise ValueError('no data here')\n", "ValueError: no data here"),
    ("class Model(torch.nn.Module):\n    def __init__(self, *args):\n        super().__init__()\n\n"
     "    def forward(self, *args):\n        raise RuntimeError('shapes do not match')\n",
     "RuntimeError: shapes do not match"),
])
def test_a_problem_whose_model_cannot_run_is_one_line_before_the_run_directory(
        mistake: str, complaint: str, tmp_path: Path, recorded_harness: EvaluationLog,
        capsys: pytest.CaptureFixture[str]) -> None:
    problem = tmp_path / "problem.py"
    problem.write_text(Path(PROBLEM).read_text() + "\n" + mistake)
    before = folder_picture(tmp_path)
    finished = kernelblaster(capsys, "optimize", problem, "--llm", "human", "--kb", "kb.json", "--run-dir", "run")
    assert finished.status == 2
    assert finished.error_line.startswith(f"{problem}: ") and complaint in finished.error_line
    assert folder_picture(tmp_path) == before
    assert recorded_harness.calls == []


# ---- item 3: run directories that cannot be made ----------------------------------------------------------


@pytest.mark.parametrize(("run_dir", "complaint"), [
    ("/sys/kbrun", "cannot create the run directory /sys/kbrun: "),
    ("empty.cu", "the run directory empty.cu is a file"),
    ("empty.cu/run", "the run directory empty.cu/run cannot be created: empty.cu is a file"),
    ("data", "the run directory data is not empty"),
])
def test_a_run_directory_that_cannot_be_made_is_one_line(
        run_dir: str, complaint: str, tmp_path: Path, recorded_harness: EvaluationLog,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "data" / "something").mkdir(parents=True)
    before = folder_picture(tmp_path)
    finished = optimize(capsys, run_dir=run_dir)
    assert finished.status == 2
    assert finished.error_line.startswith(complaint)
    assert folder_picture(tmp_path) == before


def test_a_run_directory_that_cannot_be_made_leaves_the_default_kb_uncreated(
        tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    before = folder_picture(tmp_path)
    finished = kernelblaster(capsys, "optimize", PROBLEM, "--llm", "human", "--run-dir", "/sys/kbrun")
    assert finished.status == 2
    assert finished.error_line.startswith("cannot create the run directory /sys/kbrun: ")
    assert folder_picture(tmp_path) == before


def test_a_default_kb_that_cannot_be_created_is_one_line_before_the_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded_harness: EvaluationLog,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "empty.cu"))
    before = folder_picture(tmp_path)
    finished = kernelblaster(capsys, "optimize", PROBLEM, "--llm", "human", "--run-dir", "run")
    assert finished.status == 2
    assert finished.error_line == (f"the default KB cannot be created: its folder {tmp_path}/empty.cu/kernelblaster "
                                   f"cannot be created: {tmp_path}/empty.cu is a file")
    assert folder_picture(tmp_path) == before


# ---- item 4: a run's own files, damaged -------------------------------------------------------------------


def _truncate(path: Path) -> None:
    os.truncate(path, 4096)


def _garbage_header(path: Path) -> None:
    with open(path, "r+b") as database:
        database.write(b"this is no sqlite")


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _garbage_blob(path: Path) -> None:
    with closing(sqlite3.connect(path)) as database, database:
        database.execute("UPDATE checkpoints SET checkpoint = x'c1c1c1c1deadbeef'")


def _truncated_json(path: Path) -> None:
    path.write_text(path.read_text()[:40])


def _unknown_field(path: Path) -> None:
    path.write_text(json.dumps(json.loads(path.read_text()) | {"from_the_future": 1}))


@pytest.mark.parametrize(("file_name", "damage", "detail"), [
    ("checkpoints.sqlite", _truncate, "database disk image is malformed"),
    ("checkpoints.sqlite", _garbage_header, "not an SQLite database"),
    ("checkpoints.sqlite", _directory, "a directory, not a database"),
    ("checkpoints.sqlite", _garbage_blob, "its latest checkpoint cannot be decoded"),
    ("run.json", _truncated_json, "Invalid JSON"),
    ("run.json", _unknown_field, "from_the_future: Extra inputs are not permitted"),
])
def test_a_damaged_run_file_is_named_in_one_line_with_what_to_do_and_left_as_it_is(
        file_name: str, damage: Callable[[Path], None], detail: str, waiting_run: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    damaged = waiting_run / file_name
    damage(damaged)
    before = folder_picture(waiting_run)
    commands: list[list[str | Path]] = [["resume", waiting_run], ["answer", waiting_run, "--file", "empty.cu"]]
    for command in commands:
        finished = kernelblaster(capsys, *command)
        assert finished.status == 2
        assert finished.error_line.startswith(f"{damaged} is damaged ({detail}")
        assert "is left as it is" in finished.error_line and "kernelblaster optimize" in finished.error_line
    assert folder_picture(waiting_run) == before


def test_the_way_out_of_a_damaged_run_starts_from_its_best_kernel(tmp_path: Path) -> None:
    models = chat_models([initial_kernel(), applies_first_offered("ok 0.5")])
    context = small_context(tmp_path, depth=1)
    finished = api.optimize(PROBLEM, context, services=services_for(models, EvaluationLog()))
    _garbage_header(RunFiles(finished.run_dir).checkpoints)
    with pytest.raises(UserFacingError) as refused:
        api.resume(run_dir_of(context), services=services_for(models, EvaluationLog()))
    assert f"--init {finished.run_dir / 'best.cu'}`" in str(refused.value)


# ---- item 5: what the run needs from the machine, before anything is written -----------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="specifies the behaviour without a GPU")
def test_optimize_without_a_gpu_names_what_is_missing_and_leaves_no_run_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = folder_picture(tmp_path)
    for _ in range(3):
        finished = kernelblaster(capsys, "optimize", PROBLEM, "--llm", "human", "--kb", "kb.json")
        assert finished.status == 2
        assert finished.error_line.startswith("cannot run here: the run needs an NVIDIA GPU (no CUDA GPU is visible)")
    assert folder_picture(tmp_path) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="specifies the behaviour without a GPU")
def test_optimize_without_an_endpoint_or_a_gpu_names_both_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = folder_picture(tmp_path)
    finished = kernelblaster(capsys, "optimize", PROBLEM, "--kb", "kb.json")
    assert finished.status == 2
    assert finished.error_line.startswith("no LLM endpoint configured: ")
    assert "; and the run needs an NVIDIA GPU (no CUDA GPU is visible)" in finished.error_line
    assert folder_picture(tmp_path) == before


def test_optimize_asked_to_sanitize_without_compute_sanitizer_names_it_and_leaves_no_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sanitizer_stand_in.hide(tmp_path, monkeypatch)
    before = folder_picture(tmp_path)
    finished = kernelblaster(capsys, "optimize", PROBLEM, "--llm", "human", "--kb", "kb.json", "--no-profile",
                             "--unsafe-no-sandbox", "--sanitize", "memcheck")
    assert finished.status == 2
    assert finished.error_line.startswith("cannot run here: the run needs ")
    assert re.search(r"compute-sanitizer not found \(set KERNELBLASTER_COMPUTE_SANITIZER, or put it on PATH; [^)]*\), "
                     r"for --sanitize", finished.error_line)
    assert folder_picture(tmp_path) == before


# ---- item 8: runs and reports ------------------------------------------------------------------------------


def test_runs_lists_each_run_with_its_problem_status_and_time(waiting_run: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    finished = kernelblaster(capsys, "runs", tmp_path)
    header, line = finished.out.splitlines()
    assert header.split() == ["RUN", "PROBLEM", "STATUS", "BEST", "UPDATED"]
    assert line.split()[:4] == [str(waiting_run), "elementwise_swish_scale", "waiting_for_answer", "-"]


def test_runs_of_a_folder_without_runs_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert kernelblaster(capsys, "runs", "nowhere").error_line.startswith("nowhere is not a directory of runs")


def test_report_of_a_run_without_one_says_why(waiting_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    finished = kernelblaster(capsys, "report", waiting_run)
    assert finished.status == 2
    assert finished.error_line.startswith(f"{waiting_run} has no report yet: it is waiting for your answer")


def test_a_failed_run_writes_a_report_saying_why_which_report_and_runs_show(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = api.Run.create(PROBLEM, small_context(tmp_path, depth=1),
                         services=services_for(chat_models([initial_kernel()]), EvaluationLog()))
    (tmp_path / "kb" / "kb.json").write_text("{broken")  # damaged after the run was checked, before it runs
    with pytest.raises(UserFacingError, match="not valid JSON"):
        run.advance()

    report = kernelblaster(capsys, "report", run.files.root).out
    assert report.startswith(f"# KernelBlaster run {run.record.run_id}: failed")
    assert "not valid JSON" in report and f"kernelblaster resume {run.files.root}" in report
    assert kernelblaster(capsys, "runs", tmp_path).out.splitlines()[1].split()[2] == "failed"


# ---- item 10: run directories on disk ----------------------------------------------------------------------


def test_run_json_holds_no_path_into_the_run_directory(waiting_run: Path) -> None:
    record = (waiting_run / "run.json").read_text()
    assert str(waiting_run) not in record
    assert json.loads(record)["context"]["run_dir"] is None


def test_a_copied_run_resumes_in_the_copy_even_when_the_original_is_gone(
        waiting_run: Path, tmp_path: Path, recorded_harness: EvaluationLog, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "moved" / "copy"
    shutil.copytree(waiting_run, copy)
    shutil.rmtree(waiting_run)
    (tmp_path / "answer.cu").write_text(kernel("ok 0.9"))

    assert kernelblaster(capsys, "answer", copy, "--file", "answer.cu").status == 0

    assert not waiting_run.exists()
    assert (copy / "inputs" / PROBLEM.name).read_text() == PROBLEM.read_text()
    assert list((copy / "results").glob("initial-a0.*.json"))


@pytest.mark.parametrize("loss", ["deleted", "emptied"])
def test_lost_checkpoints_are_said_and_the_run_starts_over_only_with_restart(
        loss: str, waiting_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoints = waiting_run / "checkpoints.sqlite"
    if loss == "deleted":
        checkpoints.unlink()
    else:
        checkpoints.write_bytes(b"")
    before = folder_picture(waiting_run)

    refused = kernelblaster(capsys, "resume", waiting_run)
    assert refused.status == 2
    assert f"is {'missing' if loss == 'deleted' else 'empty'}: the run's progress is lost" in refused.error_line
    assert f"kernelblaster resume {waiting_run} --restart" in refused.error_line
    assert folder_picture(waiting_run) == before

    assert kernelblaster(capsys, "resume", waiting_run, "--restart").status == 0
    assert api.Run.open(waiting_run).outcome().status == "waiting_for_answer"


@pytest.mark.skipif(torch.cuda.is_available(), reason="specifies the behaviour without a GPU")
def test_resuming_where_the_run_cannot_run_names_no_flag_resume_lacks(
        waiting_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(services, "harness_evaluator", services.HarnessEvaluators())  # the real machine check
    monkeypatch.setattr(requirements, "locate_ncu", lambda: ToolUnavailable(reason="ncu not found"))
    monkeypatch.setattr(requirements, "probe_sandbox", lambda: None)  # only the GPU and ncu are missing
    before = folder_picture(waiting_run)
    commands: list[list[str | Path]] = [["resume", waiting_run], ["answer", waiting_run, "--file", "empty.cu"]]
    for command in commands:
        finished = kernelblaster(capsys, *command)
        assert finished.status == 2
        assert finished.error_line == ("cannot run here: the run needs an NVIDIA GPU (no CUDA GPU is visible); ncu "
                                       "not found; a run started with --no-profile (in Studio: profile off) needs "
                                       "no ncu")
    assert folder_picture(waiting_run) == before


def test_resuming_a_run_whose_kb_is_gone_is_one_line(waiting_run: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "kb.json").unlink()
    before = folder_picture(tmp_path)
    finished = kernelblaster(capsys, "resume", waiting_run)
    assert finished.status == 2
    assert finished.error_line.startswith(f"KB file {tmp_path / 'kb.json'}: does not exist")
    assert folder_picture(tmp_path) == before


def test_restart_of_a_run_whose_checkpoints_are_intact_is_refused(waiting_run: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    finished = kernelblaster(capsys, "resume", waiting_run, "--restart")
    assert finished.status == 2 and "checkpoints of" in finished.error_line and "intact" in finished.error_line


def test_one_process_at_a_time_advances_a_run(waiting_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = folder_picture(waiting_run)
    with RunFiles(waiting_run).exclusive():
        finished = kernelblaster(capsys, "resume", waiting_run)
    assert finished.status == 2
    assert finished.error_line == (f"{waiting_run} is in use by another kernelblaster process (pid {os.getpid()}); "
                                   "wait for it to end, or stop it first")
    assert {name: entry for name, entry in folder_picture(waiting_run).items() if name != "run.lock"} == {
        name: entry for name, entry in before.items() if name != "run.lock"}


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664)])
def test_run_files_get_the_mode_the_umask_asks_for(umask: int, mode: int, tmp_path: Path,
                                                   recorded_harness: EvaluationLog,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    previous = os.umask(umask)
    try:
        optimize(capsys)
    finally:
        os.umask(previous)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "run").rglob("*") if path.is_file()}
    assert modes and set(modes.values()) == {mode}, modes
