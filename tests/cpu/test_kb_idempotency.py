"""Each outcome event counts once, for every run the KB has ever learned from, in whatever order it arrives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from fixtures.kb.learned import START, run_events, seed_document
from fixtures.kb.lookup import optimization_of
from pydantic import ValidationError

from kernelblaster.kb.codec import encode
from kernelblaster.kb.outcomes import EventId, OutcomeEvent, apply_outcome
from kernelblaster.kb.schema import KBDocument, OutcomeStatus
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.nodes.setup import unique_run_id

SUITE = 250


def measured(run_id: str, iteration: int, trajectory: int, step: int) -> OutcomeEvent:
    return OutcomeEvent(
        event_id=EventId(run_id=run_id, iteration=iteration, trajectory=trajectory, step=step),
        state_id="memory_bandwidth_bound",
        technique="kernel_fusion",
        status=OutcomeStatus.MEASURED,
        speedup=1.2,
    )


def attempts(document: KBDocument) -> int:
    return optimization_of(document.states["memory_bandwidth_bound"], "kernel_fusion").stats.attempts


@pytest.fixture(scope="module")
def suite() -> tuple[KBDocument, list[list[OutcomeEvent]]]:
    """A KB after a suite of 250 runs, and each run's events."""
    document, rng = seed_document(), random.Random(0)
    runs = [run_events(document, f"problem-{number:03d}", rng) for number in range(SUITE)]
    for events in runs:
        for event in events:
            assert apply_outcome(document, event, START)
    return document, runs


def test_resuming_the_first_run_of_a_suite_counts_none_of_its_events_again(
    suite: tuple[KBDocument, list[list[OutcomeEvent]]],
) -> None:
    document, runs = suite
    before = document.model_copy(deep=True)
    assert [apply_outcome(document, event, START) for event in runs[0]] == [False] * len(runs[0])
    assert document == before


def test_every_run_of_the_suite_is_remembered(suite: tuple[KBDocument, list[list[OutcomeEvent]]]) -> None:
    document, runs = suite
    assert len(document.applied_steps) == SUITE
    assert all(not apply_outcome(document, run[-1], START) for run in runs)


def test_replays_are_recognised_after_the_kb_is_written_and_read_back(
    tmp_path: Path, suite: tuple[KBDocument, list[list[OutcomeEvent]]]
) -> None:
    document, runs = suite
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    kb.replace_document(document.model_copy(deep=True))
    resumed = KnowledgeBase.load(tmp_path / "kb.json")
    assert resumed.record_outcomes(runs[0] + runs[SUITE // 2]) == [False] * (len(runs[0]) + len(runs[SUITE // 2]))


def test_remembering_a_paper_sized_run_costs_a_few_hundred_bytes() -> None:
    document = seed_document()
    empty = len(encode(document))
    for iteration in range(10):
        for trajectory in range(8):
            for step in range(4):
                apply_outcome(document, measured("level2-problem-017", iteration, trajectory, step), START)
    assert len(encode(document)) - empty < 400


def test_steps_arriving_out_of_order_each_count_once() -> None:
    document = seed_document()
    order = [(0, 1, 2), (0, 0, 0), (0, 1, 0), (0, 0, 2), (0, 0, 1), (0, 1, 1)]
    assert all(apply_outcome(document, measured("run", *key), START) for key in order)
    assert not any(apply_outcome(document, measured("run", *key), START) for key in order)
    assert attempts(document) == len(order)


def test_a_step_without_an_outcome_can_still_be_recorded_later() -> None:
    document = seed_document()
    apply_outcome(document, measured("run", 1, 0, 0), START)
    apply_outcome(document, measured("run", 1, 0, 2), START)
    assert apply_outcome(document, measured("run", 1, 0, 1), START)
    assert apply_outcome(document, measured("run", 0, 3, 0), START)


def test_the_same_step_of_another_run_is_a_new_outcome() -> None:
    document = seed_document()
    apply_outcome(document, measured("level1-problem-001", 0, 0, 0), START)
    assert apply_outcome(document, measured("level1-problem-002", 0, 0, 0), START)
    assert attempts(document) == 2


@pytest.mark.parametrize("field", ["iteration", "trajectory", "step"])
def test_an_event_id_far_beyond_any_run_shape_is_refused(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        EventId.model_validate({"run_id": "run", "iteration": 0, "trajectory": 0, "step": 0} | {field: 10**6})


def test_a_new_run_in_a_directory_of_the_same_name_is_not_taken_for_a_resume() -> None:
    first, second = unique_run_id("/suites/a/001_matmul"), unique_run_id("/suites/b/001_matmul")
    assert first != second
    assert first.startswith("001_matmul-") and second.startswith("001_matmul-")
    document = seed_document()
    assert apply_outcome(document, measured(first, 0, 0, 0), START)
    assert apply_outcome(document, measured(second, 0, 0, 0), START)
