"""Render the matched state and its selected optimizations as compact prompt text within a token budget.

Pieces are added in order of importance (the state's headline, each candidate's one-line summary, their
descriptions, their lessons, the verified code snippet of the first candidate if it has one, then the
state's description) for as long as the whole text fits the budget, and printed in reading order. A piece
whose parent did not fit is left out with it. Only the first candidate's snippet is ever shown, and only
if it takes at most half the budget: one snippet costs as much as the rest of the slice, and the larger
ones (GEMM, convolution) are starting points for first kernels rather than lowering hints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernelblaster.kb.index import StateMatch
from kernelblaster.kb.schema import OutcomeStats, PerformanceState
from kernelblaster.kb.selection import SelectedOptimization
from kernelblaster.kb.snippets import load_snippet
from kernelblaster.kb.tokens import TokenCounter, default_token_counter

# The most of the budget the first candidate's code snippet may take.
MAX_SNIPPET_SHARE = 0.5


@dataclass(frozen=True)
class _Piece:
    key: str
    importance: int
    position: tuple[int, int, int]
    text: str
    parent: str | None = None


def render_prompt_slice(
    state: PerformanceState,
    selected: Sequence[SelectedOptimization],
    token_budget: int,
    *,
    match: StateMatch | None = None,
    counter: TokenCounter | None = None,
) -> str:
    """The slice of the KB an LLM sees for this step, at most `token_budget` tokens by `counter`."""
    counter = counter or default_token_counter()
    pieces = _state_pieces(state, match) + [
        piece for rank, item in enumerate(selected, start=1) for piece in _candidate_pieces(rank, item)
    ]
    if selected and selected[0].snippet is not None:
        snippet = _snippet_piece(selected[0])
        if counter.count(snippet.text) <= token_budget * MAX_SNIPPET_SHARE:
            pieces.append(snippet)
    kept: list[_Piece] = []
    for piece in sorted(pieces, key=lambda p: (p.importance, p.position)):
        if piece.parent is not None and piece.parent not in {k.key for k in kept}:
            continue
        if counter.count(_join([*kept, piece])) <= token_budget:
            kept.append(piece)
    return _join(kept)


def _join(pieces: list[_Piece]) -> str:
    return "\n".join(piece.text for piece in sorted(pieces, key=lambda p: p.position))


def _state_pieces(state: PerformanceState, match: StateMatch | None) -> list[_Piece]:
    also = f"; also {', '.join(state.secondary)}" if state.secondary else ""
    headline = f"Performance state: {state.name} [{state.id}]. Bottleneck: {state.primary_bottleneck}{also}."
    pieces = [
        _Piece("state", 0, (0, 0, 0), headline),
        _Piece("state-description", 5, (0, 0, 2), state.description, parent="state"),
    ]
    if match is not None:
        pieces.append(_Piece("match", 1, (0, 0, 1), _match_line(match), parent="state"))
    return pieces


def _match_line(match: StateMatch) -> str:
    if match.same_arch:
        where = "this GPU's arch"
    elif match.state.arches:
        where = f"other GPUs only ({', '.join(match.state.arches)})"
    else:
        where = "the seed KB, not yet from any GPU"
    return f"Matched at cosine distance {match.distance:.3f}; evidence from {where}."


def _candidate_pieces(rank: int, item: SelectedOptimization) -> list[_Piece]:
    key = f"candidate-{rank}"
    summary = (
        f"{rank}. {item.technique} ({item.category}): expected {item.expected_speedup:.2f}x, "
        f"prior {item.prior_speedup:.2f}x; {describe_evidence(item.stats)}."
    )
    pieces = [
        _Piece(key, 1, (1, rank, 0), summary, parent="state"),
        _Piece(f"{key}-description", 2, (1, rank, 1), f"   {item.description}", parent=key),
    ]
    # Newest lessons first in importance: they reflect the latest evidence.
    for age, lesson in enumerate(reversed(item.lessons)):
        position = (1, rank, 2 + len(item.lessons) - age)
        pieces.append(_Piece(f"{key}-lesson-{age}", 3, position, f"   Lesson: {lesson}", parent=key))
    return pieces


def _snippet_piece(first: SelectedOptimization) -> _Piece:
    assert first.snippet is not None
    source = load_snippet(first.snippet).source.rstrip("\n")
    text = f"   Verified code for it (kb snippet `{first.snippet}`; adapt it to the problem):\n```cuda\n{source}\n```"
    return _Piece("candidate-1-snippet", 4, (1, 1, 3 + len(first.lessons)), text, parent="candidate-1")


def describe_evidence(stats: OutcomeStats) -> str:
    """The statistics of an optimization in a few words: `untried`, or attempts, outcomes and speedups."""
    if stats.attempts == 0:
        return "untried"
    parts = [f"{stats.attempts} attempt{'s' if stats.attempts != 1 else ''}", f"{stats.measured} measured"]
    if stats.geomean_speedup is not None:
        parts.append(f"geomean {stats.geomean_speedup:.2f}x, best {stats.best_speedup:.2f}x")
        parts.append(f"confidence {stats.confidence:.2f}")
    if stats.failures:
        parts.append(
            f"failed {stats.compile_failures} compile / {stats.verify_failures} verify / {stats.crashes} crash"
        )
    if stats.suspicious:
        parts.append(f"{stats.suspicious} suspicious")
    return ", ".join(parts)
