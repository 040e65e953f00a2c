"""Resuming a run from its SQLite checkpoints after it died: finished work is not redone, and the KB counts
every outcome and every learning edit once."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import openai
import pytest
from fixtures.graph.recorded_evaluator import EvaluationLog, SimulatedCrash
from fixtures.graph.scenario import (
    PROBLEM,
    applies_first_offered,
    chat_models,
    initial_kernel,
    run_dir_of,
    services_for,
    small_context,
)
from fixtures.kb.lookup import optimization_of

from kernelblaster.graph.app import api
from kernelblaster.kb.edits import AddLesson
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.nodes.parameter_update import KBUpdate
from kernelblaster.nodes.perf_gap_analysis import GapAnalysis
from kernelblaster.tools.errors import UserFacingError


class KilledAfterWrite(Exception):
    """The process 'dies' right after a KB write, before the node's checkpoint."""


def _kill_once_after(monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    real = getattr(KnowledgeBase, method)
    calls: list[str] = []

    def write_then_die(self: KnowledgeBase, *args: object) -> object:
        result = real(self, *args)
        if not calls:
            calls.append(method)
            raise KilledAfterWrite(method)
        return result

    monkeypatch.setattr(KnowledgeBase, method, write_then_die)


def _kb(tmp_path: Path) -> KnowledgeBase:
    return KnowledgeBase.load(tmp_path / "kb" / "kb.json")


def test_resume_after_a_crash_continues_without_redoing_finished_steps(tmp_path: Path) -> None:
    models = chat_models([initial_kernel(), applies_first_offered("ok 0.5"), applies_first_offered("ok 0.45")])
    log = EvaluationLog(crash_at_measurement=3)
    context = small_context(tmp_path)
    with pytest.raises(SimulatedCrash):
        api.optimize(PROBLEM, context, services=services_for(models, log))
    assert api.Run.open(run_dir_of(context), services_for(models, log)).outcome().status == "stopped"

    outcome = api.resume(run_dir_of(context), services=services_for(models, log))

    assert outcome.status == "finished" and outcome.best_source is not None
    assert log.labels("measure") == ["initial-a0", "i0-t0-s0-a0", "i0-t0-s1-a0", "i0-t0-s1-a0"]
    assert log.labels("verify") == ["initial-a0", "i0-t0-s0-a0", "i0-t0-s1-a0"]
    assert len(models["lowering"].prompts) == 3


def test_a_step_resumed_half_way_keeps_its_attempts_and_does_not_ask_again(tmp_path: Path) -> None:
    models = chat_models([initial_kernel(), applies_first_offered("compile_error"), applies_first_offered("ok 0.5")])
    log = EvaluationLog(crash_at_measurement=2)  # the step's second attempt, once measured
    context = small_context(tmp_path, depth=1)
    with pytest.raises(SimulatedCrash):
        api.optimize(PROBLEM, context, services=services_for(models, log))

    outcome = api.resume(run_dir_of(context), services=services_for(models, log))

    (step,) = json.loads((tmp_path / "run" / "report.json").read_text())["steps"]
    assert outcome.status == "finished"
    assert (step["outcome"], step["attempts"]) == ("measured", 2)
    assert len(models["lowering"].prompts) == 3


def test_a_step_recorded_in_the_kb_just_before_a_crash_is_counted_once(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    models = chat_models([initial_kernel(), applies_first_offered("ok 0.5")])
    context = small_context(tmp_path, depth=1)
    _kill_once_after(monkeypatch, "record_outcome")
    with pytest.raises(KilledAfterWrite):
        api.optimize(PROBLEM, context, services=services_for(models, EvaluationLog()))

    outcome = api.resume(run_dir_of(context), services=services_for(models, EvaluationLog()))

    assert outcome.status == "finished"
    stats = [opt.stats for opt in _kb(tmp_path).document.states["memory_bandwidth_bound"].optimizations
             if opt.stats.attempts]
    assert [(s.attempts, s.measured) for s in stats] == [(1, 1)]


def test_learning_edits_applied_just_before_a_crash_are_not_applied_or_asked_for_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lesson = AddLesson(state_id="memory_bandwidth_bound", technique="vectorized_access",
                       lesson="float4 loads need a scalar tail when the size is not a multiple of four")
    models = chat_models([initial_kernel(), applies_first_offered("ok 0.5")],
                         perf_gap_analysis=GapAnalysis(analysis="the tail was mishandled"),
                         parameter_update=KBUpdate(edits=[lesson], rationale="seen in this run"))
    context = small_context(tmp_path, depth=1)
    _kill_once_after(monkeypatch, "apply_edits")
    with pytest.raises(KilledAfterWrite):
        api.optimize(PROBLEM, context, services=services_for(models, EvaluationLog()))

    api.resume(run_dir_of(context), services=services_for(models, EvaluationLog()))

    lessons = optimization_of(_kb(tmp_path).document.states["memory_bandwidth_bound"], "vectorized_access").lessons
    assert lessons.count(lesson.lesson) == 1
    assert len(models["parameter_update"].prompts) == 1


def test_resuming_a_finished_run_changes_nothing(tmp_path: Path) -> None:
    models = chat_models([initial_kernel(), applies_first_offered("ok 0.5")])
    log = EvaluationLog()
    context = small_context(tmp_path, depth=1)
    first = api.optimize(PROBLEM, context, services=services_for(models, log))
    calls = list(log.calls)

    again = api.resume(run_dir_of(context), services=services_for(models, log))

    assert again == first
    assert log.calls == calls


def test_a_rejected_endpoint_stops_the_run_which_resumes_once_it_is_fixed(tmp_path: Path) -> None:
    refused = openai.AuthenticationError("invalid api key", response=httpx2.Response(
        401, request=httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")), body=None)
    context = small_context(tmp_path, depth=1)
    with pytest.raises(UserFacingError, match="refused"):
        api.optimize(PROBLEM, context, services=services_for(chat_models([refused]), EvaluationLog()))
    log = EvaluationLog()

    fixed = chat_models([initial_kernel(), applies_first_offered("ok 0.5")])
    outcome = api.resume(run_dir_of(context), services=services_for(fixed, log))

    assert outcome.best_source is not None
    assert log.labels("baseline") == []
