"""What runs may spend: a run out of tokens ends cleanly with its report saying why, runs sharing a suite's
budget stop when it is spent, a resumed run counts what it spent before; the request gate of an endpoint
is shared and only ever tightened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.graph.fake_openai import FakeOpenAI, kernelblaster_roles, optimize_through
from fixtures.graph.recorded_evaluator import EvaluationLog, SimulatedCrash, recorded_evaluators
from fixtures.graph.scenario import PROBLEM

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.services import Services
from kernelblaster.graph.llm.budget import TokenBudget, gate_for


def _spent_per_request(run_dir: Path) -> list[int]:
    records = [json.loads(line) for line in (run_dir / "llm.jsonl").read_text().splitlines()]
    return [record["usage"]["input_tokens"] + record["usage"]["output_tokens"] for record in records]


def test_a_run_out_of_tokens_ends_cleanly_keeping_its_kernel_with_the_report_saying_why(tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles) as server:
        outcome = optimize_through(server, tmp_path, token_limit=1, iterations=2)
    assert len(server.requests) == 1  # the first request spent the budget; none was made after it
    assert outcome.status == "finished" and outcome.best_source is not None
    assert outcome.ended_early is not None and "run's token limit was reached" in outcome.ended_early
    report = (tmp_path / "run" / "report.md").read_text()
    assert "The run ended early:** the run's token limit was reached" in report
    assert json.loads((tmp_path / "run" / "report.json").read_text())["ended_early"] == outcome.ended_early


def test_runs_sharing_a_suite_budget_stop_when_it_is_spent(tmp_path: Path) -> None:
    suite = TokenBudget(limit=1, scope="suite")
    services = Services(evaluators=recorded_evaluators(EvaluationLog()), token_budget=suite)
    with FakeOpenAI(kernelblaster_roles) as server:
        first = optimize_through(server, tmp_path / "first", services=services)
        second = optimize_through(server, tmp_path / "second", services=services)
    assert len(server.requests) == 1
    assert suite.spent == sum(_spent_per_request(tmp_path / "first" / "run"))
    assert first.best_source is not None and "suite's token limit" in (first.ended_early or "")
    assert second.best_source is None and "suite's token limit" in (second.ended_early or "")


def test_a_resumed_run_counts_the_tokens_it_spent_before_the_crash(tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles) as server, pytest.raises(SimulatedCrash):
        optimize_through(server, tmp_path, EvaluationLog(crash_at_measurement=2), token_limit=100_000)
    context = RunContext.model_validate(json.loads((tmp_path / "run" / "run.json").read_text())["context"])
    reopened = Services().for_run(context, str(PROBLEM), str(tmp_path / "run"))
    assert reopened.agents.budget.spent == sum(_spent_per_request(tmp_path / "run")) > 0


def test_charging_a_run_charges_its_suite_and_either_limit_stops_it() -> None:
    suite = TokenBudget(limit=100, scope="suite")
    run = TokenBudget(limit=1000, parent=suite)
    run.charge(60)
    assert (run.spent, suite.spent, run.exhausted()) == (60, 60, None)
    TokenBudget(None, parent=suite).charge(40)
    assert run.exhausted() == "the suite's token limit was reached (100 of 100 tokens spent)"


def test_a_budget_without_a_limit_is_never_spent() -> None:
    unlimited = TokenBudget(None)
    unlimited.charge(10**12)
    assert unlimited.exhausted() is None


def test_every_run_at_one_endpoint_shares_its_gate_and_the_smallest_limit_wins() -> None:
    gate = gate_for("http://127.0.0.1:1/v1", 4)
    assert gate_for("http://127.0.0.1:1/v1/", 2) is gate
    gate_for("http://127.0.0.1:1/v1", 8)
    assert gate.limit == 2
    assert gate_for("http://127.0.0.1:2/v1", 8) is not gate
