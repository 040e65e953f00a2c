"""What the nodes ask of an LLM role, and what they get back: `Question`, `Answer`, the `Agent` protocol.

An agent answers a question with a validated pydantic object, or raises `AgentFailed` (the endpoint
stayed unreachable, every answer was unusable, or the token budget is spent: `BudgetExhausted`); the node
then records a failed step and the run goes on (or, out of budget, ends). Answers are journaled in the run
directory by question key, so a resumed run replays an answer that was already paid for instead of asking
again, and KB edits derived from it come out the same.

A schema that is mainly code (`TextAnswer`) can also be answered as plain text in a fixed form, read
strictly: a form error is shown to the model, which answers again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, Self, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from kernelblaster.graph.llm.roles import Role
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.tools.files import write_text_atomically

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class Question(Generic[T]):
    """One prompt to one role; `key` is unique within the run (it names the journal entry)."""

    role: Role
    node: str
    key: str
    schema: type[T]
    system: str
    user: str
    # Checks the schema cannot express (the code defines kb_forward, the technique was offered);
    # returns what is wrong, shown to the model on a retry, or None.
    check: Callable[[T], str | None] | None = None

    def problem_with(self, value: T) -> str | None:
        return self.check(value) if self.check else None


@dataclass(frozen=True)
class Answer(Generic[T]):
    value: T
    usage: TokenUsage


class AgentFailed(Exception):
    """No usable answer: the endpoint failed past its retries, or every answer was unusable."""

    def __init__(self, message: str, usage: TokenUsage) -> None:
        super().__init__(message)
        self.usage = usage


class BudgetExhausted(AgentFailed):
    """No request was made: the run's (or the suite's) token budget is spent."""


class AnswerFormatError(ValueError):
    """A text answer not in the required form; the message says what is wrong, for the model to fix."""


@runtime_checkable
class TextAnswer(Protocol):
    """A schema whose answers a model writes as plain text rather than JSON (code is better written unescaped)."""

    @classmethod
    def text_format(cls) -> str:
        """How to write the answer, for the model."""

    @classmethod
    def from_text(cls, text: str) -> Self:
        """The answer read strictly from `text`; `AnswerFormatError` says what is not in the form."""

    def to_text(self) -> str:
        """The answer written in the form `from_text` reads."""


class Agent(Protocol):
    def ask(self, question: Question[T]) -> Answer[T]: ...


def no_usage(question: Question[T], model: str = "") -> TokenUsage:
    return TokenUsage(role=question.role, node=question.node, input_tokens=0, output_tokens=0, model=model)


class _JournalEntry(BaseModel):
    answer: str
    usage: TokenUsage


class AnswerJournal:
    """Answers already received in this run, one JSON file per question key."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def recall(self, question: Question[T]) -> Answer[T] | None:
        path = self._path(question)
        if not path.exists():
            return None
        try:
            entry = _JournalEntry.model_validate_json(path.read_text())
            value = question.schema.model_validate_json(entry.answer)
        except ValidationError:
            return None  # written by another version of the schema: ask again
        return Answer(value=value, usage=entry.usage)

    def keep(self, question: Question[T], answer: Answer[T]) -> None:
        entry = _JournalEntry(answer=answer.value.model_dump_json(), usage=answer.usage)
        write_text_atomically(self._path(question), entry.model_dump_json())

    def _path(self, question: Question[T]) -> Path:
        return self.directory / f"{question.key}.json"
