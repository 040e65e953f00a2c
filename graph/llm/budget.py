"""What runs may spend on LLMs: requests in flight per endpoint (`RequestGate`, shared by the whole process)
and tokens per run or per suite of runs (`TokenBudget`, shared by reference).

Trajectories and roles ask in parallel threads, and a suite runs several problems in one process, so the
gate is process-wide and keyed by the endpoint's URL: every run that talks to one server shares its
limit (the smallest limit asked for wins). A suite runner shares one `TokenBudget` across its runs:

    suite = TokenBudget(limit=5_000_000, scope="suite")
    services = Services(token_budget=suite)          # each run's own budget charges the suite's too
    for problem in problems:
        Run.create(problem, RunContext(token_limit=400_000), services=services).advance()
    print(suite.spent, suite.exhausted())
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class TokenBudget:
    """Tokens (input + output) a run or a suite may spend; thread-safe. A request in flight when the limit is
    reached still completes, so a budget may end a little over its limit (by at most the requests in flight).

    `parent` is charged with everything this budget is charged, and its exhaustion exhausts this budget too.
    """

    def __init__(self, limit: int | None, *, scope: str = "run", spent: int = 0,
                 parent: TokenBudget | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"a token limit is positive, not {limit}")
        self.limit = limit
        self.scope = scope
        self.parent = parent
        self._spent = spent
        self._lock = threading.Lock()

    @property
    def spent(self) -> int:
        with self._lock:
            return self._spent

    def charge(self, tokens: int) -> None:
        with self._lock:
            self._spent += tokens
        if self.parent is not None:
            self.parent.charge(tokens)

    def exhausted(self) -> str | None:
        """Why no more requests may be made (this budget's or a parent's limit is reached), or None."""
        spent = self.spent
        if self.limit is not None and spent >= self.limit:
            return f"the {self.scope}'s token limit was reached ({spent} of {self.limit} tokens spent)"
        return self.parent.exhausted() if self.parent is not None else None


class RequestGate:
    """At most `limit` requests in flight through this gate; the limit can only be tightened."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._in_flight = 0
        self._changed = threading.Condition()

    def tighten(self, limit: int) -> None:
        with self._changed:
            self.limit = min(self.limit, limit)

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: self._in_flight < self.limit)
            self._in_flight += 1
        try:
            yield
        finally:
            with self._changed:
                self._in_flight -= 1
                self._changed.notify()


_gates: dict[str, RequestGate] = {}
_gates_lock = threading.Lock()


def gate_for(endpoint: str, limit: int) -> RequestGate:
    """The process-wide gate of `endpoint` (its base URL), tightened to `limit`."""
    key = endpoint.rstrip("/")
    with _gates_lock:
        gate = _gates.setdefault(key, RequestGate(limit))
    gate.tighten(limit)
    return gate
