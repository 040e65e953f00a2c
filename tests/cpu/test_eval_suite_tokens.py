"""A suite's token limit (`bench run --suite-token-limit`): once its problems, each in a process of its own, have
spent it, no further problem starts, the running ones end cleanly, and the results and the report say why;
a resume with a higher limit goes on. Real KernelBench problems, worker processes, scripted agents and the
recorded evaluator in place of a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.suite.scripted_suite import KERNELBENCH, services_factory, suite_config

from kernelblaster.eval.problems import select_problems
from kernelblaster.eval.report import write_report
from kernelblaster.eval.results import ProblemRow
from kernelblaster.eval.runner import resume_suite, start_suite
from kernelblaster.eval.suite import SuiteEnding, open_suite
from kernelblaster.eval.suite_tokens import SuiteStopRequest, SuiteTokens
from kernelblaster.graph.core.run_files import RunFiles
from kernelblaster.graph.llm.budget import TokenBudget

# Three iterations of one depth-2 trajectory: about 5,800 tokens per problem with the scripted agents. Two
# problems run at once, so the suite passes this limit about half-way through its first two problems.
SUITE_LIMIT = 6000
ANSWER_DELAY_S = 0.05


def _state(root: Path) -> tuple[list[ProblemRow], SuiteEnding | None]:
    suite = open_suite(root)
    try:
        return suite.db.problems(), suite.ending()
    finally:
        suite.db.close()


@pytest.fixture(scope="module")
def stopped_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("suite-tokens") / "suite"
    config = suite_config(context={"iterations": 3}, token_limit=SUITE_LIMIT)
    start_suite(root, config, services_factory(delay_s=ANSWER_DELAY_S))
    return root


def test_no_problem_starts_once_the_suite_has_spent_its_token_limit(stopped_suite: Path) -> None:
    rows, ending = _state(stopped_suite)

    started = [row for row in rows if row.status != "pending"]
    assert ending is not None and ending.reason == "token_limit"
    assert [row.position for row in started] == [0, 1]
    assert ending.left == 3 and ending.tokens >= SUITE_LIMIT
    assert ending.tokens == sum(row.result.total_tokens for row in started if row.result)
    assert not any((stopped_suite / "problems").glob("00[234]-*"))


def test_problems_running_at_the_limit_end_cleanly_with_their_best_kernel_saying_why(stopped_suite: Path) -> None:
    rows, _ = _state(stopped_suite)

    stopped = [row for row in rows if row.result and row.result.stopped_by == "suite_tokens"]
    assert stopped, "the suite's limit falls mid-run for the problems that were running"
    for row in stopped:
        assert row.status == "done" and row.result is not None and row.result.best_ms is not None
        assert row.result.total_tokens < 5000, "ended well before its three iterations"
        report = RunFiles(row.run_dir or "").report_markdown.read_text()
        assert "**The run ended early:** the suite's token limit was reached" in report


def test_the_suite_report_says_it_ended_at_its_token_limit(stopped_suite: Path, tmp_path: Path) -> None:
    write_report(stopped_suite, [], tmp_path)

    markdown = (tmp_path / "report.md").read_text()
    assert "The suite ended early: the suite's token limit was reached" in markdown
    assert "3 problem(s) were not run" in markdown
    assert "stopped at the suite's token limit" in markdown


def test_a_resumed_suite_stays_stopped_at_its_limit_and_goes_on_with_a_higher_one(tmp_path: Path) -> None:
    root = tmp_path / "suite"
    problems = select_problems(KERNELBENCH, [1], {19, 23})
    factory = services_factory()
    start_suite(root, suite_config(problems, window=1, gpus=(0,), token_limit=1000), factory)
    first, _ = _state(root)

    resume_suite(root, factory)
    again, stopped = _state(root)
    resume_suite(root, factory, token_limit=100_000)
    rows, ending = _state(root)

    assert [row.status for row in first] == ["done", "pending"] and again == first
    assert stopped is not None and stopped.reason == "token_limit" and stopped.left == 1
    assert ending is not None and ending.reason == "finished" and ending.left == 0
    assert [row.status for row in rows] == ["done", "done"] and rows[0] == first[0]
    assert not (root / "stop_request.txt").exists()


def test_suite_tokens_count_each_problem_at_the_most_seen() -> None:
    tokens = SuiteTokens(limit=100)
    tokens.seen(0, 60)
    tokens.seen(0, 20)
    tokens.seen(1, 30)
    assert tokens.total == 90 and tokens.exhausted() is None
    tokens.seen(1, 40)
    assert tokens.exhausted() == "the suite's token limit was reached (100 of 100 tokens spent)"


def test_a_run_budget_is_exhausted_once_the_suite_asks_to_stop_and_stays_so(tmp_path: Path) -> None:
    request = tmp_path / "stop_request.txt"
    run_budget = TokenBudget(10_000, parent=SuiteStopRequest(request))
    assert run_budget.exhausted() is None

    request.write_text("the suite's token limit was reached (7 of 5 tokens spent)\n")
    assert run_budget.exhausted() == "the suite's token limit was reached (7 of 5 tokens spent)"
    request.unlink()
    assert run_budget.exhausted() == "the suite's token limit was reached (7 of 5 tokens spent)"
