"""The ablation switches change what the agents are shown and whether the KB is written: memory frozen or
none, cycles-only profile feedback, the minimal agent. Each is compared with the full method on one run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixtures.graph.recorded_evaluator import EvaluationLog
from fixtures.graph.scenario import (
    applies_first_offered,
    chat_models,
    initial_kernel,
    kernel,
    run_graph,
    services_for,
    small_context,
)
from fixtures.graph.scripted_chat import Reply, ScriptedChatModel
from langchain_core.messages import BaseMessage

from kernelblaster.graph.llm.roles import Role
from kernelblaster.kb.codec import decode
from kernelblaster.kb.journal import read_changes
from kernelblaster.kb.paths import seed_kb_bytes
from kernelblaster.kb.store import read_document
from kernelblaster.nodes.kernels import CudaAnswer
from kernelblaster.nodes.match_state import MatchDecision

KB_SLICE_HEADLINE = "Performance state: "
PROFILE_FINDINGS = "recorded profile"


def _chooses_its_own(messages: list[BaseMessage]) -> CudaAnswer:
    return CudaAnswer(technique="loop_unrolling", explanation="unrolled", cuda_source=kernel("ok 0.5"))


def _lowering_prompts(models: dict[Role, ScriptedChatModel]) -> list[str]:
    return [str(prompt[1].content) for prompt in models["lowering"].prompts[1:]]


def _run(tmp_path: Path, lowering: Reply, **switches: Any) -> tuple[dict[Role, ScriptedChatModel], Path]:
    models = chat_models([initial_kernel(), lowering], state_matcher=MatchDecision(
        state_id="memory_bandwidth_bound", reason="the nearest"))
    context = small_context(tmp_path, depth=1, **switches)
    run_graph(services_for(models, EvaluationLog()), context)
    return models, Path(context.kb_path or "")


def test_full_memory_shows_a_kb_slice_teaches_the_kb_and_runs_the_learning_roles(tmp_path: Path) -> None:
    models, _ = _run(tmp_path, applies_first_offered("ok 0.5"))

    (prompt,) = _lowering_prompts(models)
    assert KB_SLICE_HEADLINE in prompt and "Offered optimizations" in prompt
    assert "Technique names" in str(models["lowering"].prompts[0][1].content)
    assert [change.id.kind for change in read_changes(tmp_path / "run" / "kb_changes.jsonl")] == ["outcome", "learning"]
    assert len(models["parameter_update"].prompts) == 1


def test_frozen_memory_shows_the_kb_slice_but_never_writes_the_kb(tmp_path: Path) -> None:
    models, kb_path = _run(tmp_path, applies_first_offered("ok 0.5"), memory="frozen")

    (prompt,) = _lowering_prompts(models)
    assert KB_SLICE_HEADLINE in prompt
    assert not (tmp_path / "run" / "kb_changes.jsonl").exists()
    assert read_document(kb_path) == decode(Path("seed.json"), seed_kb_bytes()).document
    assert models["policy_evaluation"].prompts == [] and models["parameter_update"].prompts == []


def test_no_memory_shows_the_state_but_no_kb_and_offers_nothing(tmp_path: Path) -> None:
    models, kb_path = _run(tmp_path, _chooses_its_own, memory="none")

    (prompt,) = _lowering_prompts(models)
    assert KB_SLICE_HEADLINE not in prompt and "Offered optimizations" not in prompt
    assert "Technique names" not in str(models["lowering"].prompts[0][1].content)  # no catalogue either
    assert "## Its performance state" in prompt and PROFILE_FINDINGS in prompt
    assert len(models["state_extractor"].prompts) == 1 and models["state_matcher"].prompts == []
    assert models["parameter_update"].prompts == []
    assert read_document(kb_path) == decode(Path("seed.json"), seed_kb_bytes()).document
    assert not (kb_path.parents[1] / "run" / "kb_changes.jsonl").exists()


def test_cycles_only_feedback_shows_cycles_instead_of_the_profile_and_matches_without_a_signature(
        tmp_path: Path) -> None:
    models, _ = _run(tmp_path, applies_first_offered("ok 0.5"), profile_feedback="cycles-only")

    (prompt,) = _lowering_prompts(models)
    assert "elapsed cycles" in prompt and PROFILE_FINDINGS not in prompt
    extractor_prompt = str(models["state_extractor"].prompts[0][1].content)
    assert "elapsed cycles" in extractor_prompt and "DRAM" not in extractor_prompt
    assert "no signature to compare" in str(models["state_matcher"].prompts[0][1].content)


def test_the_minimal_agent_lowers_from_the_code_and_profile_alone(tmp_path: Path) -> None:
    models, kb_path = _run(tmp_path, _chooses_its_own, agent="minimal")

    (prompt,) = _lowering_prompts(models)
    assert PROFILE_FINDINGS in prompt and "## Its performance state" not in prompt
    assert KB_SLICE_HEADLINE not in prompt and "Offered optimizations" not in prompt
    for role in ("state_extractor", "state_matcher", "policy_evaluation", "perf_gap_analysis", "parameter_update"):
        assert models[role].prompts == [], role
    assert read_document(kb_path) == decode(Path("seed.json"), seed_kb_bytes()).document
    assert not (kb_path.parents[1] / "run" / "kb_changes.jsonl").exists()


def test_a_new_state_proposed_under_frozen_memory_is_not_added(tmp_path: Path) -> None:
    proposing = MatchDecision.model_validate({
        "state_id": None, "reason": "nothing like it",
        "new_state": {"id": "tensor_barrier_bound", "optimizations": [
            {"technique": "vectorized_access", "prior_speedup": 1.2}]}})
    models = chat_models([initial_kernel("ok 0.9 profile=novel"), applies_first_offered("ok 0.5")],
                         state_matcher=proposing)
    context = small_context(tmp_path, depth=1, memory="frozen")

    finished = run_graph(services_for(models, EvaluationLog()), context)

    (step,) = finished.state["steps"]
    assert step.state_id is not None and step.state_id != "tensor_barrier_bound" and not step.discovered_state
    assert len(models["state_matcher"].prompts) == 1
