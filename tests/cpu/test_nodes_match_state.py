"""match_state and extract_state: the performance state of a kernel, known or newly discovered."""

from __future__ import annotations

from pathlib import Path

from fixtures.graph.recorded_evaluator import EvaluationLog, signature_named
from fixtures.graph.scenario import (
    applies_first_offered,
    chat_models,
    initial_kernel,
    run_graph,
    services_for,
    small_context,
)
from fixtures.graph.scripted_chat import Reply, ScriptedChatModel, server_error

from kernelblaster.graph.core.state import StepRecord
from kernelblaster.graph.llm.roles import Role
from kernelblaster.kb.schema import Category
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.nodes.match_state import MatchDecision, NewState, ProposedOptimization

NOVEL_KERNEL = initial_kernel("ok 0.9 profile=novel")
DISCOVERY = MatchDecision(state_id=None, reason="tensor pipes and barriers dominate; no known state is like it",
                          new_state=NewState(id="tensor_barrier_bound", optimizations=[
                              ProposedOptimization(technique="warp_shuffle_reduction", prior_speedup=1.3),
                              ProposedOptimization(technique="barrier_elision", prior_speedup=1.2,
                                                   category=Category.CONTROL_FLOW,
                                                   description="Remove __syncthreads that guard no shared data."),
                          ]))


def _first_step(tmp_path: Path, lowering: list[Reply],
                **roles: Reply | list[Reply]) -> tuple[StepRecord, dict[Role, ScriptedChatModel]]:
    models = chat_models(lowering, **roles)
    finished = run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=1))
    return finished.state["steps"][0], models


def _kb(tmp_path: Path) -> KnowledgeBase:
    return KnowledgeBase.load(tmp_path / "kb" / "kb.json")


def test_a_profile_unlike_any_known_state_becomes_a_new_state_in_the_kb(tmp_path: Path) -> None:
    step, _ = _first_step(tmp_path, [NOVEL_KERNEL, applies_first_offered("ok 0.5")], state_matcher=DISCOVERY)
    kb = _kb(tmp_path)
    state = kb.document.states["tensor_barrier_bound"]
    assert (step.state_id, step.discovered_state) == ("tensor_barrier_bound", True)
    assert state.signature == signature_named("novel") and state.arches == ["sm_90"]
    assert {o.technique for o in state.optimizations} == {"warp_shuffle_reduction", "barrier_elision"}
    assert kb.document.techniques["barrier_elision"].category is Category.CONTROL_FLOW


def test_the_matcher_can_place_a_distant_profile_in_a_known_state(tmp_path: Path) -> None:
    known = MatchDecision(state_id="reduction_sync_bound", reason="barrier stalls: a reduction-bound kernel")
    step, _ = _first_step(tmp_path, [NOVEL_KERNEL, applies_first_offered("ok 0.5")], state_matcher=known)
    assert (step.state_id, step.discovered_state) == ("reduction_sync_bound", False)


def test_a_state_the_matcher_was_not_offered_is_asked_for_again(tmp_path: Path) -> None:
    invented = MatchDecision(state_id="made_up_state", reason="looks new")
    known = MatchDecision(state_id="reduction_sync_bound", reason="barrier stalls")
    step, models = _first_step(tmp_path, [NOVEL_KERNEL, applies_first_offered("ok 0.5")],
                               state_matcher=[invented, known])
    assert step.state_id == "reduction_sync_bound"
    assert "state_id must be one of" in models["state_matcher"].prompts[1][-1].content


def test_a_nearly_identical_profile_is_matched_without_asking(tmp_path: Path) -> None:
    step, models = _first_step(tmp_path, [initial_kernel("ok 0.9 profile=compute_bound_fp32"),
                                          applies_first_offered("ok 0.5")])
    assert step.state_id == "compute_bound_fp32"
    assert models["state_matcher"].prompts == []


def test_without_a_matcher_answer_the_nearest_state_stands(tmp_path: Path) -> None:
    step, _ = _first_step(tmp_path, [NOVEL_KERNEL, applies_first_offered("ok 0.5")],
                          state_matcher=[server_error()])
    assert step.state_id in _kb(tmp_path).document.states and not step.discovered_state


def test_without_a_state_extractor_answer_the_profiles_own_reading_stands(tmp_path: Path) -> None:
    step, models = _first_step(tmp_path, [initial_kernel(), applies_first_offered("ok 0.5")],
                               state_extractor=[server_error()])
    assert step.outcome == "measured"
    assert "memory-bound: memory-bound. memory-bound: DRAM" in models["lowering"].prompts[1][1].content


def test_a_kernel_whose_state_is_known_is_not_read_again(tmp_path: Path) -> None:
    models = chat_models([initial_kernel(), applies_first_offered("crash"), applies_first_offered("ok 0.5")])
    finished = run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=2, crash_retries=0))
    assert [step.outcome for step in finished.state["steps"]] == ["crashed", "measured"]
    assert len(models["state_extractor"].prompts) == 1


def test_without_a_profile_the_matcher_chooses_among_all_known_states(tmp_path: Path) -> None:
    chosen = MatchDecision(state_id="memory_bandwidth_bound", reason="an elementwise kernel streams memory")
    models = chat_models([initial_kernel(), applies_first_offered("ok 0.5")], state_matcher=chosen)
    finished = run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=1, profile=False))
    offered = models["state_matcher"].prompts[0][1].content
    assert finished.state["steps"][0].state_id == "memory_bandwidth_bound"
    assert "no signature to compare" in offered and "register_spilling" in offered
