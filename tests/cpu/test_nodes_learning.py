"""The textual gradient of an iteration — policy evaluation, gap analysis, KB edits — and the KB snapshot."""

from __future__ import annotations

import json
from pathlib import Path

from fixtures.graph.recorded_evaluator import EvaluationLog
from fixtures.graph.scenario import (
    ANALYSIS,
    applies_first_offered,
    chat_models,
    initial_kernel,
    run_graph,
    services_for,
    small_context,
)
from fixtures.graph.scripted_chat import Reply, ScriptedChatModel, connection_error
from fixtures.kb.lookup import optimization_of

from kernelblaster.graph.context import Role
from kernelblaster.graph.state import LearningNote, LearningStage
from kernelblaster.kb.edits import AddLesson, SetPrior
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.nodes.parameter_update import KBUpdate

LESSON = AddLesson(state_id="memory_bandwidth_bound", technique="vectorized_access",
                   lesson="float4 loads need a scalar tail when the size is not a multiple of four")


def _learn(tmp_path: Path,
           **roles: Reply | list[Reply]) -> tuple[dict[LearningStage, LearningNote], dict[Role, ScriptedChatModel]]:
    models = chat_models([initial_kernel(), applies_first_offered("ok 0.5")], **roles)
    finished = run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=1))
    return {note.stage: note for note in finished.state["learning"]}, models


def test_the_replay_buffer_is_shown_to_policy_evaluation_with_prediction_and_outcome(tmp_path: Path) -> None:
    _, models = _learn(tmp_path)
    replay = models["policy_evaluation"].prompts[0][1].content
    assert "predicted" in replay and "measured, 1.80x" in replay


def test_the_gap_analysis_sees_the_policy_evaluation_and_the_profiles(tmp_path: Path) -> None:
    _, models = _learn(tmp_path)
    prompt = models["perf_gap_analysis"].prompts[0][1].content
    assert "vectorized access beat its prediction" in prompt and "memory-bound: DRAM" in prompt


def test_learning_edits_are_applied_and_rejected_ones_kept_with_their_reason(tmp_path: Path) -> None:
    wrong_state = SetPrior(state_id="no_such_state", technique="vectorized_access", prior_speedup=1.4)
    notes, _ = _learn(tmp_path, parameter_update=KBUpdate(edits=[LESSON, wrong_state], rationale="evidence"))
    document = KnowledgeBase.load(tmp_path / "kb" / "kb.json").document
    lessons = optimization_of(document.states[LESSON.state_id], LESSON.technique).lessons
    assert LESSON.lesson in lessons
    assert notes["parameter_update"].summary.startswith("1 of 2 edits applied; rejected set_prior: no state")
    saved_path = notes["parameter_update"].path
    assert saved_path is not None
    saved = json.loads((tmp_path / "run" / saved_path).read_text())
    assert [result["applied"] for result in saved["results"]] == [True, False]


def test_an_update_that_does_not_fit_the_edit_schema_is_asked_for_again(tmp_path: Path) -> None:
    invalid = {"edits": [{"kind": "rewrite_everything"}], "rationale": "bold"}
    notes, models = _learn(tmp_path, parameter_update=[invalid, KBUpdate(edits=[LESSON], rationale="evidence")])
    assert notes["parameter_update"].summary == "1 of 1 edits applied"
    assert "does not fit the schema" in models["parameter_update"].prompts[1][-1].content


def test_every_iteration_leaves_a_snapshot_of_the_kb(tmp_path: Path) -> None:
    _learn(tmp_path)
    assert len(list((tmp_path / "kb" / "kb.snapshots").glob("run*/iteration-0000.json.gz"))) == 1


def test_a_failed_analysis_skips_the_kb_edits_and_the_run_finishes(tmp_path: Path) -> None:
    notes, models = _learn(tmp_path, perf_gap_analysis=[connection_error()])
    assert notes["perf_gap_analysis"].summary.startswith("skipped")
    assert notes["parameter_update"].summary == "skipped: no gap analysis to learn from"
    assert models["parameter_update"].prompts == []
    assert (tmp_path / "run" / "report.md").exists()


def test_an_analysis_is_learned_from_when_given(tmp_path: Path) -> None:
    notes, _ = _learn(tmp_path)
    assert notes["perf_gap_analysis"].summary == ANALYSIS.analysis
