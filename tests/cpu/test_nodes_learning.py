"""The textual gradient of an iteration — policy evaluation, gap analysis, KB edits — and the KB snapshot;
the evidence each learning role is shown of every step, and the limits of its answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import pytest
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
from fixtures.graph.scripted_chat import Reply, ScriptedChatModel, server_error
from fixtures.kb.lookup import optimization_of
from langchain_core.messages import BaseMessage
from pydantic import BaseModel, Field, StringConstraints

from kernelblaster.graph.core.state import LearningNote, LearningStage
from kernelblaster.graph.llm.roles import Role
from kernelblaster.kb.edits import AddLesson, AddOptimization, SetPrior
from kernelblaster.kb.schema import Category
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.nodes import step_evidence
from kernelblaster.nodes.kernels import CudaAnswer
from kernelblaster.nodes.parameter_update import KBUpdate
from kernelblaster.nodes.prompting import answer_limits

LESSON = AddLesson(state_id="memory_bandwidth_bound", technique="vectorized_access",
                   lesson="float4 loads need a scalar tail when the size is not a multiple of four")
# A new technique the model limits to scans, learned on a problem that performs none.
SCAN_ONLY = AddOptimization(state_id="memory_bandwidth_bound", technique="segmented_scan_fusion", prior_speedup=1.4,
                            category=Category.ALGORITHM, description="Fuse the scan with its producer.",
                            applies_to=["scan"])


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
    notes, models = _learn(tmp_path, perf_gap_analysis=[server_error()])
    assert notes["perf_gap_analysis"].summary.startswith("skipped")
    assert notes["parameter_update"].summary == "skipped: no gap analysis to learn from"
    assert models["parameter_update"].prompts == []
    assert (tmp_path / "run" / "report.md").exists()


def test_an_analysis_is_learned_from_when_given(tmp_path: Path) -> None:
    notes, _ = _learn(tmp_path)
    assert notes["perf_gap_analysis"].summary == ANALYSIS.analysis


LEARNING_ROLES: tuple[Role, ...] = ("policy_evaluation", "perf_gap_analysis", "parameter_update")


def _learning_prompts(tmp_path: Path, lowering: list[Reply], depth: int = 1) -> dict[str, str]:
    models = chat_models(lowering)
    run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=depth))
    return {role: str(models[role].prompts[0][1].content) for role in LEARNING_ROLES}


@pytest.mark.parametrize("role", LEARNING_ROLES)
def test_every_learning_role_sees_what_a_step_changed_and_the_kernel_before_and_after(tmp_path: Path,
                                                                                       role: str) -> None:
    prompt = _learning_prompts(tmp_path, [initial_kernel(), applies_first_offered("ok 0.5")])[role]
    assert "the agent's explanation: applied (ok 0.5)" in prompt
    assert "-// RECORDED: ok 0.9\n+// RECORDED: ok 0.5" in prompt
    assert "before: 0.9000 ms, 0.89x vs PyTorch; profile: memory-bound: DRAM 86%" in prompt
    assert "after: 0.5000 ms, 1.60x vs PyTorch; profile: memory-bound: DRAM 86%" in prompt


@pytest.mark.parametrize(("role", "limit"), [
    ("policy_evaluation", "- summary: at most 3000 characters"),
    ("perf_gap_analysis", "- each of wrong_assumptions, each of lessons: at most 500 characters"),
    ("parameter_update", "- lesson (add_lesson): 10 to 400 characters"),
])
def test_every_learning_role_is_told_the_limits_of_its_answer(tmp_path: Path, role: str, limit: str) -> None:
    prompt = _learning_prompts(tmp_path, [initial_kernel(), applies_first_offered("ok 0.5")])[role]
    assert "Limits of the answer (an answer outside them is refused and asked for again):" in prompt
    assert limit in prompt


def test_the_agents_reason_for_its_choice_is_shown_with_the_step(tmp_path: Path) -> None:
    def reasoned(messages: list[BaseMessage]) -> CudaAnswer:
        answer = applies_first_offered("ok 0.5")(messages)
        return answer.model_copy(update={"choice_reason": "the kernel streams memory, so fewer bytes matter most"})

    prompt = _learning_prompts(tmp_path, [initial_kernel(), reasoned])["perf_gap_analysis"]
    assert "why the agent chose it: the kernel streams memory, so fewer bytes matter most" in prompt


def test_a_failed_step_shows_its_last_attempt_and_no_kernel_after(tmp_path: Path) -> None:
    prompt = _learning_prompts(tmp_path, [initial_kernel(), applies_first_offered("incorrect"),
                                          applies_first_offered("incorrect"), applies_first_offered("incorrect")])
    gap = prompt["perf_gap_analysis"]
    assert "verify_failed: check 'correct' failed: seed 0: 1200 of 4096 elements differ (3 attempt(s))" in gap
    assert "after: not measured" in gap and "+// RECORDED: incorrect" in gap


def test_past_its_budget_the_evidence_drops_diffs_then_keeps_one_line_per_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_evidence, "EVIDENCE_CHARS", 900)
    prompt = _learning_prompts(tmp_path, [initial_kernel(), applies_first_offered("ok 0.5"),
                                          applies_first_offered("ok 0.4")], depth=2)["perf_gap_analysis"]
    evidence = prompt.split("the diff of its code.\n\n", 1)[1].split("\n\nExplain the gaps", 1)[0]
    first, second = evidence.split("\n\n")
    assert "```diff" in first
    assert second.startswith("- iteration 1, trajectory 0, step 2:") and "\n" not in second


def test_a_long_diff_is_cut_to_its_first_lines() -> None:
    before = "\n".join(f"float a{n} = {n};" for n in range(200))
    after = "\n".join(f"double a{n} = {n};" for n in range(200))
    lines = step_evidence.compact_diff(before, after).splitlines()
    assert lines[:2] == ["--- before.cu", "+++ after.cu"]
    assert len(lines) == step_evidence.DIFF_LINES + 1
    assert lines[-1] == f"... ({403 - step_evidence.DIFF_LINES} more diff lines)"


class _Limited(BaseModel):
    name: Annotated[str, StringConstraints(min_length=3, max_length=40)]
    tags: list[Annotated[str, StringConstraints(max_length=20)]] = Field(max_length=5)
    weight: float = Field(ge=0.5, le=2.0)
    free: str


def test_answer_limits_name_every_limited_field_once_per_limit() -> None:
    assert answer_limits(_Limited).splitlines()[1:] == [
        "- name: 3 to 40 characters",
        "- tags: at most 5 items",
        "- each of tags: at most 20 characters",
        "- weight: 0.5 to 2.0",
    ]


class _Unlimited(BaseModel):
    text: str
    count: int = Field(ge=0)


def test_a_schema_without_limits_has_no_limits_section() -> None:
    assert answer_limits(_Unlimited) == ""


def test_a_technique_learned_with_kinds_its_problem_lacks_is_still_offered_for_that_problem(tmp_path: Path) -> None:
    models = chat_models([initial_kernel(), applies_first_offered("ok 0.5")],
                         parameter_update=KBUpdate(edits=[SCAN_ONLY], rationale="evidence"))
    finished = run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=1))
    problem_kinds = finished.state["facts"].operations
    technique = KnowledgeBase.load(tmp_path / "kb" / "kb.json").document.techniques["segmented_scan_fusion"]
    assert problem_kinds and "scan" not in problem_kinds
    assert technique.applies_to_problem(problem_kinds) and technique.applies_to_problem(["scan"])


def test_the_models_own_operation_kinds_are_kept_beside_the_widened_ones(tmp_path: Path) -> None:
    notes, _ = _learn(tmp_path, parameter_update=KBUpdate(edits=[SCAN_ONLY], rationale="evidence"))
    saved_path = notes["parameter_update"].path
    assert saved_path is not None
    saved = json.loads((tmp_path / "run" / saved_path).read_text())
    assert saved["proposed"]["edits"][0]["applies_to"] == ["scan"]
    assert saved["update"]["edits"][0]["applies_to"] != ["scan"]


def test_the_learning_note_says_when_a_known_techniques_catalogue_entry_was_kept(tmp_path: Path) -> None:
    redefined = AddOptimization(state_id="compute_bound_fp32", technique="welford_norm", prior_speedup=1.3,
                                description="A different idea under an old name.")
    notes, _ = _learn(tmp_path, parameter_update=KBUpdate(edits=[redefined], rationale="evidence"))
    assert notes["parameter_update"].summary == (
        "1 of 1 edits applied; technique welford_norm is already in the catalogue and its entry stays as it is: "
        "the description given here went unused (set_description rewrites a description)")
