"""A suite's token limit (`bench run --suite-token-limit`): what the suite has spent, counted by its runner,
and the request to stop that the problems' runs, each in a process of its own, obey.

The runner counts each problem by what it sees of it: a finished problem's result; a running one's latest
progress event; before its first event, what its run directory's recording (`llm.jsonl`) holds (a problem
interrupted by a kill spent those). Once the total reaches the limit the runner starts no more problems
and writes the stop request (`SUITE/stop_request.txt`, the reason in words); each running problem's run
reads it through its token budget (`SuiteStopRequest`) and ends cleanly, as at its own token limit: its
trajectories stop after their current step, and its report says why.
"""

from __future__ import annotations

from pathlib import Path

from kernelblaster.graph.llm.budget import TokenBudget
from kernelblaster.tools.files import write_text_atomically


class SuiteTokens:
    """Tokens spent by a suite's problems (input + output, as run budgets count them), against its limit."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._by_problem: dict[int, int] = {}

    def seen(self, position: int, tokens: int) -> None:
        """What problem `position` has spent, as last seen; a lower figure (a result that lost a session's
        tokens to a crash, say) never takes back what was seen before."""
        self._by_problem[position] = max(tokens, self._by_problem.get(position, 0))

    @property
    def total(self) -> int:
        return sum(self._by_problem.values())

    def exhausted(self) -> str | None:
        """Why the suite must stop (its limit is reached), or None."""
        total = self.total
        if self.limit is not None and total >= self.limit:
            return f"the suite's token limit was reached ({total} of {self.limit} tokens spent)"
        return None


def request_stop(path: Path, reason: str) -> None:
    """Ask every running problem of the suite to end cleanly, for `reason`."""
    write_text_atomically(path, reason)


def withdraw_stop(path: Path) -> None:
    """Let problems run again (a resumed suite whose limit is not reached)."""
    path.unlink(missing_ok=True)


class SuiteStopRequest(TokenBudget):
    """A run's parent budget in a suite with a token limit: exhausted once the runner asks the suite to stop.

    The request is looked for at every check until it is found (runs check before each LLM request and at
    each branch that could go on); once found, it stands."""

    def __init__(self, path: Path, parent: TokenBudget | None = None) -> None:
        super().__init__(None, scope="suite", parent=parent)
        self.path = path
        self.reason: str | None = None

    def exhausted(self) -> str | None:
        if self.reason is None:
            try:
                self.reason = self.path.read_text().strip() or "the suite was asked to stop"
            except FileNotFoundError:
                return super().exhausted()
        return self.reason
