"""Live progress of a suite: problems done, running and failed, what each GPU is doing, the best speedups,
the geometric mean so far, tokens, and an estimate of the time left; printed one line per event.
"""

from __future__ import annotations

import time
from typing import TextIO

from kernelblaster.eval.metrics import geomean
from kernelblaster.eval.results import STOPPED_BY, ProblemResult, ProblemRow
from kernelblaster.eval.worker import ProblemEvent


class SuiteBoard:
    """What the suite is doing now, from its rows at the start and the events since."""

    def __init__(self, rows: list[ProblemRow]) -> None:
        self._ids = {row.position: row.problem_id for row in rows}
        self._results = {row.position: row.result for row in rows if row.result is not None}
        self._running: dict[int, ProblemEvent] = {}
        self._started = time.monotonic()
        self._finished_here = 0

    def started(self, position: int, slot: str) -> None:
        self._running[position] = ProblemEvent(position=position, slot=slot, text="starting")

    def update(self, event: ProblemEvent) -> None:
        self._running[event.position] = event

    def finished(self, position: int, result: ProblemResult) -> None:
        self._running.pop(position, None)
        self._results[position] = result
        self._finished_here += 1

    @property
    def done(self) -> int:
        return sum(1 for result in self._results.values() if result.verdict in ("ok", "no_valid_kernel"))

    @property
    def failed(self) -> int:
        return len(self._results) - self.done

    @property
    def geomean_so_far(self) -> float | None:
        return geomean([r.vs_baseline for r in self._results.values() if r.verdict == "ok" and r.vs_baseline])

    @property
    def tokens(self) -> int:
        finished = sum(result.total_tokens for result in self._results.values())
        return finished + sum(event.tokens for event in self._running.values())

    def seconds_left(self) -> float | None:
        """Problems left times the time between two problems finishing so far in this session."""
        if not self._finished_here:
            return None
        per_problem = (time.monotonic() - self._started) / self._finished_here
        return per_problem * (len(self._ids) - len(self._results))

    def best(self, count: int = 3) -> list[tuple[str, float]]:
        scored = [(self._ids[p], r.vs_baseline) for p, r in self._results.items() if r.vs_baseline is not None]
        return sorted(scored, key=lambda item: -item[1])[:count]

    def headline(self) -> str:
        geo = f"{self.geomean_so_far:.2f}x" if self.geomean_so_far else "-"
        left = self.seconds_left()
        eta = f"~{duration_text(left)} left" if left is not None else "time left unknown"
        return (f"{self.done + self.failed}/{len(self._ids)} finished ({self.failed} failed), "
                f"{len(self._running)} running | geomean {geo} | {self.tokens / 1000:.1f}k tokens | {eta}")

    def activity(self) -> list[str]:
        """One line per running problem: its slot, its id, its latest note, its best speedup."""
        lines = []
        for position, event in sorted(self._running.items(), key=lambda item: item[1].slot):
            best = f"{event.best_speedup:.2f}x" if event.best_speedup else "-"
            lines.append(f"{event.slot:>8} {self._ids[position]}: {event.text} (best {best})")
        return lines


class SuiteDisplay:
    """Prints the board: the headline with each event, and each finished problem."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def event(self, board: SuiteBoard, event: ProblemEvent) -> None:
        best = f"{event.best_speedup:.2f}x" if event.best_speedup else "-"
        print(f"[{board.headline()}]\n  {event.slot} {event.text} (best {best})", file=self.out, flush=True)

    def stopping(self, board: SuiteBoard, reason: str, left: int) -> None:
        print(f"stopping the suite: {reason}; the running problems end after their current step, {left} "
              f"problem(s) not started\n[{board.headline()}]", file=self.out, flush=True)

    def finished(self, board: SuiteBoard, problem_id: str, result: ProblemResult) -> None:
        speedup = f"{result.vs_baseline:.2f}x vs the faster PyTorch baseline" if result.vs_baseline else "no speedup"
        why = f" ({result.error})" if result.error else f" (stopped at {STOPPED_BY[result.stopped_by]})" \
            if result.stopped_by else ""
        print(f"{problem_id} on {result.gpu or '-'}: {result.verdict}, {speedup}{why}", file=self.out, flush=True)
        running = board.activity()
        print(f"[{board.headline()}]" + "".join(f"\n  {line}" for line in running), file=self.out, flush=True)


def duration_text(seconds: float) -> str:
    """A time left as people read it: `45s`, `12m`, `2.5h`."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
