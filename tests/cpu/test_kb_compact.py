"""Compact storage: statistics as arrays in the order the file names, one record per line, nothing lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.kb.learned import MEMORY, learned_document

from kernelblaster.kb.codec import decode, encode
from kernelblaster.kb.errors import KBFileError
from kernelblaster.kb.schema import STATS_FIELDS, KBDocument
from kernelblaster.kb.store import KnowledgeBase


def round_trip(document: KBDocument) -> KBDocument:
    return decode(Path("kb.json"), encode(document)).document


@pytest.mark.parametrize("seed", range(8))
def test_a_learned_kb_decodes_to_exactly_what_was_encoded(seed: int) -> None:
    document = learned_document(seed)
    assert round_trip(document) == document


def test_the_learned_fixture_holds_every_kind_of_content() -> None:
    document = learned_document()
    optimizations = [opt for state in document.states.values() for opt in state.optimizations]
    stats = [opt.stats for opt in optimizations] + [transition.stats for transition in document.transitions]
    assert {s.measured > 0 for s in stats} == {True, False}
    assert any(s.failures for s in stats) and any(s.suspicious for s in stats)
    assert document.transitions and document.state_aliases and document.pruned.recent
    assert any(opt.lessons for opt in optimizations) and any(opt.deprecated for opt in optimizations)
    assert any(0 < mask < 7 for steps in document.applied_steps.values() for masks in steps for mask in masks)


def test_saving_and_loading_through_the_store_keeps_the_document(tmp_path: Path) -> None:
    kb = KnowledgeBase.load(tmp_path / "kb.json")
    kb.replace_document(learned_document())
    assert KnowledgeBase.load(tmp_path / "kb.json").document == learned_document()


def test_statistics_are_one_array_in_the_order_the_file_names() -> None:
    document = learned_document()
    data = json.loads(encode(document))
    assert data["stats_fields"] == list(STATS_FIELDS)
    stored = data["states"][MEMORY]["optimizations"][0]["stats"]
    stats = document.states[MEMORY].optimizations[0].stats
    assert dict(zip(data["stats_fields"], stored, strict=True))["attempts"] == stats.attempts
    assert stored[:7] == [stats.attempts, stats.compile_failures, stats.verify_failures, stats.crashes,
                          stats.suspicious, stats.measured, stats.wins]


def test_untried_optimizations_store_no_statistics() -> None:
    data = json.loads(encode(learned_document()))
    untried = [opt for state in data["states"].values() for opt in state["optimizations"] if "stats" not in opt]
    assert untried
    assert all(set(opt) <= {"technique", "prior_speedup", "lessons", "deprecated"} for opt in untried)


def test_each_optimization_transition_and_run_is_one_line() -> None:
    document = learned_document()
    lines = encode(document).decode().splitlines()
    optimizations = sum(len(state.optimizations) for state in document.states.values())
    assert sum(line.lstrip().startswith('{"technique":') for line in lines) == optimizations
    assert sum(line.lstrip().startswith('{"before":') for line in lines) == len(document.transitions)
    assert sum(line.startswith('  "run-') for line in lines) == len(document.applied_steps)


def test_a_file_whose_statistics_have_another_layout_is_refused(tmp_path: Path) -> None:
    data = json.loads(encode(learned_document()))
    data["stats_fields"] = list(reversed(STATS_FIELDS))
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(data))
    with pytest.raises(KBFileError, match=r"stats_fields .* differ from this version's layout"):
        KnowledgeBase.load(path)


def test_statistics_whose_counts_do_not_add_up_are_reported_where_they_are(tmp_path: Path) -> None:
    data = json.loads(encode(learned_document()))
    tried = next(n for n, opt in enumerate(data["states"][MEMORY]["optimizations"]) if "stats" in opt)
    data["states"][MEMORY]["optimizations"][tried]["stats"][0] += 1
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(data))
    with pytest.raises(KBFileError, match=rf"states\.{MEMORY}\.optimizations\[{tried}\]\.stats: .*attempts"):
        KnowledgeBase.load(path)
