"""A run's resources (its evaluators, which in the harness hold reference outputs in GPU memory) live only
while the run is being advanced: however it stops, they are given back, so a long-lived process (a
`langgraph dev` server, a suite of many problems) keeps nothing of the runs it advanced.

The recorded evaluator stands in for the GPU; its log says when each evaluator was closed, and whether any
is still referenced from anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.graph.recorded_evaluator import EvaluationLog, SimulatedCrash, recorded_evaluators
from fixtures.graph.scenario import (
    PROBLEM,
    applies_first_offered,
    chat_models,
    initial_kernel,
    run_dir_of,
    run_graph,
    services_for,
    small_context,
)
from fixtures.graph.scripted_chat import ScriptedChatModel

from kernelblaster.graph.app import api
from kernelblaster.graph.core.services import Services
from kernelblaster.graph.llm.roles import Role


def _all_given_back(log: EvaluationLog) -> bool:
    """Every evaluator made was closed, and nothing refers to any of them any more."""
    return len(log.labels("close")) == len(log.made) > 0 and log.alive() == 0


def _two_step_models() -> dict[Role, ScriptedChatModel]:
    return chat_models([initial_kernel(), applies_first_offered("ok 0.5"), applies_first_offered("ok 0.45")])


def test_a_finished_run_gives_back_every_evaluator_it_made(tmp_path: Path) -> None:
    log = EvaluationLog()
    context = small_context(tmp_path, gpus=(0, 1), trajectories=2)
    outcome = api.optimize(PROBLEM, context, services=services_for(chat_models([initial_kernel()] + [
        applies_first_offered("ok 0.5")] * 4), log))
    assert outcome.status == "finished"
    assert _all_given_back(log)


def test_the_finish_node_gives_them_back_when_the_graph_is_driven_without_the_api(tmp_path: Path) -> None:
    log = EvaluationLog()
    finished = run_graph(services_for(_two_step_models(), log), small_context(tmp_path))
    assert finished.path[-1] == "finish"
    assert _all_given_back(log)


def test_a_run_that_fails_in_a_node_gives_them_back_and_gets_new_ones_when_resumed(tmp_path: Path) -> None:
    log = EvaluationLog(crash_at_measurement=2)
    context = small_context(tmp_path)
    with pytest.raises(SimulatedCrash):
        api.optimize(PROBLEM, context, services=services_for(_two_step_models(), log))
    assert _all_given_back(log)
    made_before = len(log.made)

    outcome = api.resume(run_dir_of(context), services=services_for(_two_step_models(), log))

    assert outcome.status == "finished"
    assert len(log.made) > made_before and _all_given_back(log)


def test_a_run_waiting_for_a_persons_answer_gives_them_back(tmp_path: Path) -> None:
    log = EvaluationLog()
    context = small_context(tmp_path, llm="human")
    outcome = api.optimize(PROBLEM, context, services=Services(evaluators=recorded_evaluators(log)))
    assert outcome.status == "waiting_for_answer"
    assert log.labels("baseline") and _all_given_back(log)


def test_a_run_whose_progress_is_no_longer_read_gives_them_back(tmp_path: Path) -> None:
    log = EvaluationLog()
    context = small_context(tmp_path)
    run = api.Run.create(PROBLEM, context, services=services_for(_two_step_models(), log))
    progress = run.progress()
    assert next(progress).note.node == "setup"
    progress.close()  # a suite's wall-time budget, a display that went away
    assert _all_given_back(log)
    assert api.resume(run_dir_of(context), services=services_for(_two_step_models(), log)).status == "finished"


def test_runs_sharing_services_give_back_only_their_own(tmp_path: Path) -> None:
    log = EvaluationLog()
    services = services_for(chat_models([initial_kernel(), applies_first_offered("ok 0.5")] * 2), log)
    paused = api.Run.create(PROBLEM, small_context(tmp_path / "first", depth=1), services=services).progress()
    next(paused)
    api.optimize(PROBLEM, small_context(tmp_path / "second", depth=1), services=services)
    assert log.alive() == 1  # the first run's evaluator: it is still being advanced
    paused.close()
    assert _all_given_back(log)


def test_leaving_a_services_block_gives_back_every_run_it_served(tmp_path: Path) -> None:
    """How `langgraph dev` scopes each request (`graph.graph.studio_graph`): a run the server stopped half-way
    never reached `finish`, yet its resources go when the request does."""
    log = EvaluationLog(crash_at_measurement=1)
    with services_for(_two_step_models(), log) as services:
        with pytest.raises(SimulatedCrash):
            run_graph(services, small_context(tmp_path))
        assert log.alive() == 1
    assert _all_given_back(log)
