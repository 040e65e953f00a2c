"""The parts of a suite one by one: choosing problems, the results database and its version, the suite KB's
ordered writer, the KB journal, the live board."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fixtures.kb.lookup import optimization_of
from fixtures.suite.scripted_suite import KERNELBENCH

from kernelblaster.eval.problems import ordered, parse_levels, parse_ranges, select_problems
from kernelblaster.eval.progress import SuiteBoard
from kernelblaster.eval.results import SCHEMA_VERSION, ProblemResult, ProblemRow, ResultsDB, RoleTokens
from kernelblaster.eval.suite_kb import SuiteKB, start_version
from kernelblaster.eval.worker import ProblemBudget, ProblemEvent
from kernelblaster.kb.codec import decode
from kernelblaster.kb.journal import ChangeId, KBChange, append_change, read_changes
from kernelblaster.kb.outcomes import EventId, OutcomeEvent
from kernelblaster.kb.paths import seed_kb_bytes
from kernelblaster.kb.schema import OutcomeStatus
from kernelblaster.tools.errors import UserFacingError

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _outcome(run_id: str, step: int, speedup: float = 1.5) -> KBChange:
    event = OutcomeEvent(event_id=EventId(run_id=run_id, iteration=0, trajectory=0, step=step),
                         state_id="memory_bandwidth_bound", technique="vectorized_access",
                         status=OutcomeStatus.MEASURED, speedup=speedup)
    return KBChange.of_outcome(event, NOW)


def test_levels_and_ranges_select_problems_of_a_kernelbench_directory_in_level_then_number_order() -> None:
    problems = select_problems(KERNELBENCH, parse_levels("2,1"), parse_ranges("1,4,19"))
    assert [p.id for p in problems] == ["level1/1_Square_matrix_multiplication_", "level1/19_ReLU",
                                        "level2/1_Conv2D_ReLU_BiasAdd", "level2/4_Conv2d_Mish_Mish"]


def test_a_list_file_gives_its_problems_in_its_order_relative_to_itself(tmp_path: Path) -> None:
    listing = tmp_path / "suite.txt"
    listing.write_text(f"# two problems\n{KERNELBENCH / 'level2' / '4_Conv2d_Mish_Mish.py'}\n"
                       f"{KERNELBENCH / 'level1' / '19_ReLU.py'}  # ReLU\n")
    assert [(p.id, p.level, p.number) for p in select_problems(listing)] == [
        ("level2/4_Conv2d_Mish_Mish", 2, 4), ("level1/19_ReLU", 1, 19)]


def test_a_seeded_shuffle_is_the_same_every_time_and_differs_from_the_given_order() -> None:
    problems = select_problems(KERNELBENCH)
    shuffled = ordered(problems, "shuffle", 7)
    assert shuffled == ordered(problems, "shuffle", 7)
    assert shuffled != problems and sorted(p.id for p in shuffled) == sorted(p.id for p in problems)


@pytest.mark.parametrize(("levels", "numbers", "message"), [
    ("4", None, "--level 4: .* has levels 1, 2"),
    ("1", "200-210", "no problem numbered 200"),
    ("x", None, "expected level numbers"),
    (None, "5-3", "not a number or a range"),
])
def test_an_unknown_level_or_range_is_a_clear_error(levels: str | None, numbers: str | None, message: str) -> None:
    with pytest.raises(UserFacingError, match=message):
        select_problems(KERNELBENCH, parse_levels(levels) if levels else None,
                        parse_ranges(numbers) if numbers else None)


def test_a_directory_without_problems_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserFacingError, match="no problems found"):
        select_problems(tmp_path)


def test_a_database_from_a_newer_version_is_refused_and_left_untouched(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "results.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE future (x)")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns

    with pytest.raises(UserFacingError, match="newer kernelblaster"):
        ResultsDB.open(path)

    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before


def test_a_problems_result_and_tokens_read_back_as_written(tmp_path: Path) -> None:
    db = ResultsDB.open(tmp_path / "results.sqlite", create=True)
    db.add_problems([ProblemRow(position=0, problem_id="level1/19_ReLU", level=1, number=19, path="p.py",
                                status="pending")])
    result = ProblemResult(verdict="ok", gpu="gpu0", eager_ms=1.0, best_ms=0.5, vs_baseline=2.0, wall_s=3.0,
                           gpu_name="NVIDIA H100 80GB HBM3", driver_version="570.124.06", cuda_runtime="12.8",
                           nvcc_version="12.8.93", torch_version="2.13.0+cu128",
                           tokens=[RoleTokens(role="lowering", calls=2, input_tokens=10, output_tokens=20)])
    db.mark_running(0, "run", 0)
    db.record_result(0, result)
    (row,) = db.problems()
    db.close()
    assert row.status == "done" and row.result == result and row.result.total_tokens == 30


MACHINE_COLUMNS = ("gpu_name", "driver_version", "cuda_runtime", "nvcc_version", "torch_version")


def _version_1_database(path: Path) -> None:
    """A database as version 1 of the schema wrote it: one finished problem, no machine columns."""
    db = ResultsDB.open(path, create=True)
    db.add_problems([ProblemRow(position=0, problem_id="level1/19_ReLU", level=1, number=19, path="p.py",
                                status="pending")])
    db.record_result(0, ProblemResult(verdict="ok", gpu="gpu0", best_ms=0.5, vs_baseline=2.0))
    db.close()
    with sqlite3.connect(path) as raw:
        for column in MACHINE_COLUMNS:
            raw.execute(f"ALTER TABLE problems DROP COLUMN {column}")
        raw.execute("PRAGMA user_version = 1")


def test_an_older_database_is_brought_up_to_date_when_opened_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    _version_1_database(path)
    db = ResultsDB.open(path)
    (old,) = db.problems()
    db.add_problems([ProblemRow(position=1, problem_id="level1/23_Softmax", level=1, number=23, path="q.py",
                                status="pending")])
    db.record_result(1, ProblemResult(verdict="ok", gpu="gpu0", gpu_name="NVIDIA H200", torch_version="2.13.0"))
    new = db.problems()[1]
    db.close()
    assert old.result is not None and (old.result.best_ms, old.result.gpu_name) == (0.5, None)
    assert new.result is not None and (new.result.gpu_name, new.result.torch_version) == ("NVIDIA H200", "2.13.0")
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_an_older_database_left_unmigrated_reads_its_rows_without_a_machine(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    _version_1_database(path)
    db = ResultsDB(sqlite3.connect(path), path)  # as where it could not be written: not migrated
    (row,) = db.problems()
    db.close()
    assert row.result is not None and row.result.vs_baseline == 2.0 and row.result.driver_version is None


def test_the_suite_kb_applies_journals_in_suite_order_whatever_order_they_arrive_in(tmp_path: Path) -> None:
    suite_kb, first = SuiteKB.start(tmp_path, seed_kb_bytes())

    assert suite_kb.submit(1, [_outcome("b", 0, 2.0)]) == []
    made = suite_kb.submit(0, [_outcome("a", 0, 1.5)])

    assert [(v.version, v.position) for v in made] == [(1, 0), (2, 1)]
    document = decode(tmp_path / "x", suite_kb.document_bytes(2)).document
    stats = optimization_of(document.states["memory_bandwidth_bound"], "vectorized_access").stats
    assert (stats.attempts, stats.measured) == (2, 2) and first.version == 0
    assert suite_kb.submit(0, [_outcome("a", 1)]) == []  # already applied: a resubmission changes nothing


def test_a_problem_starts_from_the_kb_holding_every_problem_a_window_before_it() -> None:
    assert [start_version(p, 2, True) for p in range(5)] == [0, 0, 1, 2, 3]
    assert [start_version(p, 1, True) for p in range(3)] == [0, 1, 2]
    assert [start_version(p, 2, False) for p in range(3)] == [0, 0, 0]


def test_a_journal_gives_each_change_once_in_logical_order_and_ignores_a_cut_last_line(tmp_path: Path) -> None:
    journal = tmp_path / "kb_changes.jsonl"
    learning = KBChange(id=ChangeId(run_id="r", iteration=0, kind="learning"), at=NOW)
    for change in (learning, _outcome("r", 1), _outcome("r", 0), _outcome("r", 1)):
        append_change(journal, change)
    with open(journal, "a") as cut:
        cut.write('{"id": {"run_id": "r", "iter')

    assert [(c.id.step, c.id.kind) for c in read_changes(journal)] == [(0, "outcome"), (1, "outcome"),
                                                                        (0, "learning")]


def test_the_board_counts_problems_and_the_geometric_mean_so_far() -> None:
    rows = [ProblemRow(position=p, problem_id=f"p{p}", level=1, number=p, path="x", status="pending")
            for p in range(3)]
    board = SuiteBoard(rows)
    board.started(0, "gpu0")
    board.update(ProblemEvent(position=0, slot="gpu0", text="lower", best_speedup=2.0, tokens=500))
    assert board.tokens == 500 and board.activity() == ["    gpu0 p0: lower (best 2.00x)"]

    board.finished(0, ProblemResult(verdict="ok", vs_baseline=2.0))
    board.finished(1, ProblemResult(verdict="ok", vs_baseline=8.0))
    board.finished(2, ProblemResult(verdict="load_error", error="broken"))

    assert (board.done, board.failed) == (2, 1)
    assert board.geomean_so_far == pytest.approx(4.0)
    assert board.seconds_left() == 0.0 and "3/3 finished (1 failed)" in board.headline()


def test_a_wall_time_budget_is_spent_once_its_seconds_have_passed() -> None:
    assert (ProblemBudget(max_wall_s=10).exceeded(9.9), ProblemBudget(max_wall_s=10).exceeded(10),
            ProblemBudget().exceeded(1e9)) == (False, True, False)
