"""The `human` provider: a person answers a role's prompt while the graph waits in `interrupt()`.

The pending question is in the checkpoint (and in Studio's interrupt panel); `kernelblaster answer RUN_DIR
--file ANSWER` resumes the run with the file's text. An answer is a JSON object of the role's schema, or,
for roles whose answer is mainly code (see `PlainTextAnswer`), the models' text form or the code alone. An
answer that cannot be used is asked for again, with the reason.
"""

from __future__ import annotations

import json
from typing import Protocol, Self, runtime_checkable

from langgraph.types import interrupt
from pydantic import BaseModel, ValidationError

from kernelblaster.graph.llm.agents import Agent, AgentFailed, Answer, Question, T, TextAnswer, no_usage
from kernelblaster.graph.llm.answers import storable_answer


@runtime_checkable
class PlainTextAnswer(Protocol):
    """A schema that can also be read from an answer written as plain text (CUDA in a file)."""

    @classmethod
    def from_plain_text(cls, text: str) -> Self: ...


class HumanQuestion(BaseModel):
    """What the interrupt shows the person answering."""

    key: str
    role: str
    node: str
    instructions: str
    prompt: str
    answer_format: str
    previous_answer_problem: str | None = None


class HumanAgent(Agent):
    def __init__(self, answer_retries: int) -> None:
        self.answer_retries = answer_retries

    def ask(self, question: Question[T]) -> Answer[T]:
        problem: str | None = None
        for _ in range(self.answer_retries + 1):
            reply = interrupt(_human_question(question, problem).model_dump())
            # The CLI resumes with the answer file's text; Studio may resume with a JSON value instead.
            text = reply if isinstance(reply, str) else json.dumps(reply)
            try:
                # Made storable as a model's answer is: a file may hold control characters, JSON escapes too.
                value = storable_answer(parse_answer(text, question.schema))
            except (ValidationError, ValueError) as error:
                problem = f"the answer could not be read: {' '.join(str(error).split())[:500]}"
                continue
            problem = question.problem_with(value)
            if problem is None:
                return Answer(value=value, usage=no_usage(question))
        raise AgentFailed(f"{question.role}: no usable answer after {self.answer_retries + 1} tries ({problem})",
                          no_usage(question))


def parse_answer(text: str, schema: type[T]) -> T:
    """A JSON object of `schema`, or for a `PlainTextAnswer` schema, plain text."""
    stripped = text.strip()
    if stripped.startswith("{") or not issubclass(schema, PlainTextAnswer):
        return schema.model_validate_json(stripped)
    return schema.from_plain_text(stripped)


def _answer_format(schema: type[BaseModel]) -> str:
    """The models' text form first where the role has one (a person reads the prompt the models read), then
    the shorter forms a person may use instead."""
    as_json = f"a JSON object with this schema:\n{json.dumps(schema.model_json_schema(), indent=1)}"
    if not issubclass(schema, PlainTextAnswer):
        return as_json[0].upper() + as_json[1:]
    code_alone = "the .cu file alone (a first line `// technique: NAME` names the technique you applied)"
    if issubclass(schema, TextAnswer):
        return f"{schema.text_format()}\n\nA person may also answer with {code_alone}, or with {as_json}"
    return f"Answer with {code_alone}, or with {as_json}"


def _human_question(question: Question[T], problem: str | None) -> HumanQuestion:
    return HumanQuestion(
        key=question.key,
        role=question.role,
        node=question.node,
        instructions=question.system,
        prompt=question.user,
        answer_format=_answer_format(question.schema),
        previous_answer_problem=problem,
    )
