"""A suite of five real KernelBench problems run end to end by the suite runner: worker processes, the
graph, real checkpoints and KBs, scripted agents and the recorded evaluator in place of a GPU.

Order, the one KB writer, resume after kill -9, budgets, and problems that fail while the suite goes on.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from fixtures.graph.recorded_evaluator import MACHINE
from fixtures.suite.scripted_suite import KERNELBENCH, services_factory, suite_config

from kernelblaster.eval.problems import select_problems
from kernelblaster.eval.results import DATABASE_NAME, ProblemRow, ResultsDB
from kernelblaster.eval.runner import resume_suite, start_suite
from kernelblaster.eval.suite import open_suite
from kernelblaster.eval.suite_kb import LATEST_NAME, start_version
from kernelblaster.graph.core.run_files import RunFiles
from kernelblaster.harness.machine import this_machine
from kernelblaster.kb.codec import decode
from kernelblaster.kb.journal import read_changes, replay
from kernelblaster.kb.paths import seed_kb_bytes
from kernelblaster.kb.schema import KBDocument
from kernelblaster.kb.snapshots import decompressed

TESTS = Path(__file__).resolve().parents[1]
DRIVER = TESTS / "fixtures" / "suite" / "suite_driver.py"
BROKEN = TESTS / "fixtures" / "problems" / "broken_import.py"


@pytest.fixture(scope="module")
def finished_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("suite") / "suite"
    start_suite(root, suite_config(), services_factory())
    return root


def _rows(root: Path) -> list[ProblemRow]:
    db = ResultsDB.open(root / DATABASE_NAME)
    try:
        return db.problems()
    finally:
        db.close()


def _kb_document(path: Path) -> KBDocument:
    return decode(path, decompressed(path.read_bytes(), path)).document


def _learning(document: KBDocument) -> str:
    """The KB's content less what differs between two runs of the same answers: times and run ids."""
    text = json.dumps(document.model_dump(mode="json", exclude={"applied_steps"}), sort_keys=True)
    return re.sub(r'"\d{4}-\d{2}-\d{2}T[^"]*"', '"time"', text)


def test_every_problem_runs_in_the_stated_order_each_from_the_kb_its_place_fixes(finished_suite: Path) -> None:
    rows = _rows(finished_suite)

    assert [row.problem_id for row in rows] == [p.id for p in select_problems(KERNELBENCH)]
    assert all(row.status == "done" and row.result and row.result.verdict == "ok" for row in rows)
    assert [row.kb_version_before for row in rows] == [start_version(row.position, 2, True) for row in rows]
    assert [row.kb_version_after for row in rows] == [1, 2, 3, 4, 5]


def test_the_one_writer_applies_each_problems_journal_in_suite_order(finished_suite: Path) -> None:
    suite = open_suite(finished_suite)
    versions = suite.db.versions()
    suite.db.close()
    expected = _kb_document(finished_suite / "kb" / versions[0].file)
    for version in versions[1:]:
        assert version.position == version.version - 1
        replay(expected, read_changes(RunFiles(suite.run_dir(version.position or 0)).kb_journal))
        assert _learning(_kb_document(finished_suite / "kb" / version.file)) == _learning(expected)
    latest = finished_suite / "kb" / LATEST_NAME
    newest = finished_suite / "kb" / versions[-1].file
    assert latest.read_bytes() == decompressed(newest.read_bytes(), newest)


def test_each_problem_learns_from_its_own_kb_copy_and_never_touches_the_suite_kb(finished_suite: Path) -> None:
    suite = open_suite(finished_suite)
    suite.db.close()
    for position, problem in enumerate(suite.config.problems):
        run = RunFiles(suite.run_dir(position))
        assert json.loads(run.record.read_text())["context"]["kb_path"] == str(suite.work_dir(position) / "kb.json")
        outcomes = [c for c in read_changes(run.kb_journal) if c.outcome is not None]
        assert len(outcomes) == 2, problem.id  # depth 2: two measured steps, each learned once


def test_a_killed_suite_resumes_without_redoing_finished_problems_or_counting_kb_changes_twice(
        tmp_path: Path, finished_suite: Path) -> None:
    root = tmp_path / "suite"
    environment = os.environ | {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    runner = subprocess.Popen([sys.executable, str(DRIVER), "start", str(root)], env=environment)
    try:
        _wait_for(lambda: _statuses(root).count("done") >= 2 and "running" in _statuses(root), runner)
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    finished_before = {row.position: _mtime(Path(row.run_dir or "") / "checkpoints.sqlite")
                       for row in _rows(root) if row.status == "done"}
    interrupted = [row.position for row in _rows(root) if row.status == "running"]
    assert interrupted and _quiet_after_kill(root), "the killed runner's workers went on writing"

    resumed = subprocess.run([sys.executable, str(DRIVER), "resume", str(root)], env=environment, timeout=600,
                             capture_output=True, text=True)

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = _rows(root)
    assert all(row.status == "done" for row in rows)
    assert {p: _mtime(Path(rows[p].run_dir or "") / "checkpoints.sqlite") for p in finished_before} == finished_before
    assert _learning(_kb_document(root / "kb" / LATEST_NAME)) == \
        _learning(_kb_document(finished_suite / "kb" / LATEST_NAME))
    assert [row.result.best_ms for row in rows if row.result] == \
        [row.result.best_ms for row in _rows(finished_suite) if row.result]


def test_every_row_names_the_machine_that_measured_its_best_kernel(finished_suite: Path) -> None:
    machines = {(row.result.gpu_name, row.result.driver_version, row.result.cuda_runtime, row.result.nvcc_version,
                 row.result.torch_version) for row in _rows(finished_suite) if row.result}
    assert machines == {(MACHINE.gpu, MACHINE.driver, MACHINE.cuda_runtime, MACHINE.nvcc, MACHINE.torch)}


def test_a_problem_that_fails_to_load_is_recorded_with_the_workers_machine_and_the_suite_goes_on(
        tmp_path: Path) -> None:
    listing = tmp_path / "problems.txt"
    listing.write_text(f"{BROKEN}\n{KERNELBENCH / 'level1' / '19_ReLU.py'}\n")
    root = tmp_path / "suite"

    start_suite(root, suite_config(select_problems(listing), window=1, gpus=(0,)), services_factory())

    broken, relu = _rows(root)
    assert broken.status == "failed" and broken.result and broken.result.verdict == "load_error"
    assert "broken_import" in (broken.result.error or "")
    assert (broken.result.gpu_name, broken.result.torch_version) == (this_machine(0).gpu, torch.__version__)
    assert relu.status == "done" and relu.result and relu.result.verdict == "ok"
    assert (broken.kb_version_after, relu.kb_version_after) == (1, 2)


def test_a_problem_stops_at_its_token_budget_with_its_best_kernel_so_far(tmp_path: Path) -> None:
    problems = select_problems(KERNELBENCH, [1], {19})
    root = tmp_path / "suite"

    start_suite(root, suite_config(problems, window=1, gpus=(0,), context={"token_limit": 1000}), services_factory())

    (row,) = _rows(root)
    assert row.result is not None and row.result.stopped_by == "tokens"
    assert row.result.total_tokens < 2200 and row.result.best_ms is not None


def test_a_second_runner_on_the_same_suite_is_refused(tmp_path: Path) -> None:
    from kernelblaster.eval.suite import runner_lock
    from kernelblaster.tools.errors import UserFacingError

    root = tmp_path / "suite"
    with runner_lock(root), pytest.raises(UserFacingError, match="in use by another suite runner"):
        resume_suite(root, services_factory())


def test_the_start_kb_of_a_fresh_suite_is_the_seed(finished_suite: Path) -> None:
    suite = open_suite(finished_suite)
    first = suite.db.versions()[0]
    suite.db.close()
    assert _learning(_kb_document(finished_suite / "kb" / first.file)) == \
        _learning(decode(Path("seed.json"), seed_kb_bytes()).document)


def _statuses(root: Path) -> list[str]:
    if not (root / DATABASE_NAME).exists():
        return []
    try:
        return [row.status for row in _rows(root)]
    except Exception:  # the database is being created
        return []


def _wait_for(condition: Any, process: subprocess.Popen[bytes], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, f"the suite ended (status {process.returncode}) before it could be killed"
        assert time.monotonic() < deadline, "the suite did not get far enough to be killed"
        time.sleep(0.2)


def _mtime(path: Path) -> int:
    return path.stat().st_mtime_ns


def _quiet_after_kill(root: Path) -> bool:
    """No file of the suite changes for a while once its runner is dead (its workers died with it)."""
    time.sleep(2)
    before = {path: _mtime(path) for path in root.rglob("*") if path.is_file()}
    time.sleep(3)
    return before == {path: _mtime(path) for path in root.rglob("*") if path.is_file()}
