"""Reading a model's reply into a question's answer, for each way the answer was asked for
(`StructuredOutputMethod`), and what the model is told: the answer form, and why an answer was not used.

- `function_calling`: the answer is the arguments of a call of the schema's tool;
- `json_schema`, `json_mode`: the reply's text is the JSON object (the endpoint enforces or encourages it);
- `text`: a `TextAnswer` schema (code) is read from its plain-text form, any other schema from JSON written
  in the text (alone or in one ```json block).
Reasoning a server leaves in the text (`<think>...</think>`) is never read as the answer. A reply cut off at
the output limit is never read at all: the model is asked again, told the limit. An answer longer than
`MAX_ANSWER_CHARS` is not read either, nor sent back to the model: it is told the limit.

A reply is made storable (`storable_message`) before anything keeps, reads or shows it, and so is the answer
read from it (`storable_answer`: a JSON escape can put in it what the text did not hold): a lone surrogate or
a control character (a terminal escape sequence, NUL) becomes U+FFFD, wherever it is, so that what the run
records, reads, reports and teaches its KB is text every file can hold and no terminal obeys.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from string import Template
from typing import Any, Generic

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import BaseModel, ValidationError

from kernelblaster.graph.llm.agents import AnswerFormatError, Question, T, TextAnswer
from kernelblaster.graph.llm.roles import StructuredOutputMethod
from kernelblaster.tools.untrusted_text import storable

CUT_OFF_PLACEHOLDER = "[answer cut off at the output limit]"
# Far above any answer the roles give (a kernel of a few thousand lines is under 200 000 characters), far
# below what would make every later prompt that shows it cost more than the run: a retry prompt shows the
# failed kernel, each step's prompt the current one.
MAX_ANSWER_CHARS = 256 * 1024
OVERSIZED_PLACEHOLDER = "[answer of {size} characters, over the limit of {limit}, left out]"
_REASONING_END = "</think>"
_JSON_FENCE = "```json"


@dataclass(frozen=True)
class Reading(Generic[T]):
    """An answer read from a reply: its value, or what is wrong with it (shown to the model)."""

    value: T | None
    problem: str | None


def first_messages(question: Question[T], method: StructuredOutputMethod) -> list[BaseMessage]:
    """The question as messages, static part first: the role's instructions and the answer form, then the
    prompt (itself ordered static-first, see `nodes.prompting`)."""
    form = answer_form(question.schema, method)
    system = f"{question.system}\n\n{form}" if form else question.system
    return [SystemMessage(system), HumanMessage(question.user)]


def answer_form(schema: type[BaseModel], method: StructuredOutputMethod) -> str | None:
    """How to write the answer, when the endpoint does not carry the schema itself."""
    if method in ("function_calling", "json_schema"):
        return None
    if method == "text" and issubclass(schema, TextAnswer):
        return schema.text_format()
    return _json_form().substitute(schema=json.dumps(schema.model_json_schema(), indent=1))


@functools.cache
def _json_form() -> Template:
    return Template(resources.files("kernelblaster.graph.llm").joinpath("prompts/answer_json.txt").read_text().strip())


def storable_message(message: AIMessage) -> AIMessage:
    """`message` with every string in its text and tool calls made storable (`tools.untrusted_text`); the same
    message when there was nothing to replace."""
    update = {"content": _storable(message.content), "tool_calls": _storable(message.tool_calls),
              "invalid_tool_calls": _storable(message.invalid_tool_calls),
              "additional_kwargs": _storable(message.additional_kwargs)}
    if all(update[name] == getattr(message, name) for name in update):
        return message
    return message.model_copy(update=update)


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {_storable(key): _storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_storable(item) for item in value]
    return value


def answer_size(method: StructuredOutputMethod, reply: AIMessage) -> int:
    """The characters of the answer in `reply` (reasoning left out): the text, or the tool call's arguments."""
    if method == "function_calling" and (reply.tool_calls or reply.invalid_tool_calls):
        return sum(len(json.dumps(call["args"], ensure_ascii=False)) for call in reply.tool_calls) + \
            sum(len(call.get("args") or "") for call in reply.invalid_tool_calls)
    return len(without_reasoning(reply.text))


def oversized(method: StructuredOutputMethod, reply: AIMessage) -> str | None:
    """What is wrong with an answer over `MAX_ANSWER_CHARS`, or None."""
    size = answer_size(method, reply)
    if size <= MAX_ANSWER_CHARS:
        return None
    return (f"the answer is {size} characters long, more than the {MAX_ANSWER_CHARS} an answer may have; "
            "answer again, within the limit")


def read_reply(question: Question[T], method: StructuredOutputMethod, reply: AIMessage) -> Reading[T]:
    too_long = oversized(method, reply)
    if too_long is not None:
        return Reading(None, too_long)
    if method == "function_calling":
        return _checked(question, _read_tool_call(question.schema, reply))
    text = without_reasoning(reply.text)
    if method == "text" and issubclass(question.schema, TextAnswer):
        try:
            return _checked(question, Reading(question.schema.from_text(text), None))
        except AnswerFormatError as error:
            return Reading(None, f"the answer is not in the required form: {error}")
        except ValidationError as error:
            return Reading(None, f"the answer does not fit the schema: {describe_validation(error)}")
    return _checked(question, _read_json(question.schema, text))


def without_reasoning(text: str) -> str:
    """The answer after any reasoning the server left in the text (everything up to the last `</think>`)."""
    _, end, answer = text.rpartition(_REASONING_END)
    return answer if end else text


def _checked(question: Question[T], reading: Reading[T]) -> Reading[T]:
    if reading.value is None:
        return reading
    try:
        value = storable_answer(reading.value)
    except ValidationError as error:
        return Reading(None, f"the answer does not fit the schema: {describe_validation(error)}")
    return Reading(value, question.problem_with(value))


def storable_answer(value: T) -> T:
    """`value` with every string in it made storable: JSON escapes (`\\u001b`) put in the answer what the
    reply's text did not hold. A `ValidationError` if what was replaced breaks the schema (a pattern)."""
    fields = value.model_dump()
    cleaned = _storable(fields)
    return value if cleaned == fields else type(value).model_validate(cleaned)


def _read_tool_call(schema: type[T], reply: AIMessage) -> Reading[T]:
    if reply.tool_calls:
        return _validated(schema, lambda: schema.model_validate(reply.tool_calls[0]["args"]))
    if reply.invalid_tool_calls:
        error = reply.invalid_tool_calls[0].get("error") or "unreadable arguments"
        return Reading(None, f"the tool call's arguments are not valid JSON ({one_line(error)})")
    return Reading(None, f"the answer has no call of the {schema.__name__} tool; answer by calling it")


def _read_json(schema: type[T], text: str) -> Reading[T]:
    stripped = text.strip()
    if stripped.startswith(_JSON_FENCE):
        body, closed, rest = stripped.removeprefix(_JSON_FENCE).partition("```")
        if not closed or rest.strip():
            return Reading(None, "the ```json block must be closed and alone in the answer")
        stripped = body.strip()
    if not stripped.startswith("{"):
        return Reading(None, "the answer must be one JSON object (alone, or in one ```json block)")
    return _validated(schema, lambda: schema.model_validate_json(stripped))


def _validated(schema: type[T], validate: Callable[[], T]) -> Reading[T]:
    try:
        return Reading(validate(), None)
    except ValidationError as error:
        if any(item["type"] == "json_invalid" for item in error.errors()):
            return Reading(None, f"the answer is not valid JSON ({one_line(error.errors()[0]['msg'])})")
        return Reading(None, f"the answer does not fit the schema: {describe_validation(error)}")


def describe_validation(error: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in item['loc']) or 'answer'}: {item['msg']}" for item in error.errors()[:3]]
    more = f" (and {error.error_count() - 3} more)" if error.error_count() > 3 else ""
    return "; ".join(parts) + more


def correction(reply: AIMessage, method: StructuredOutputMethod, problem: str) -> list[BaseMessage]:
    """The reply and why it cannot be used, in the form the endpoint accepts after that reply."""
    text = f"That answer cannot be used: {problem}. Answer again, in full."
    size = answer_size(method, reply)
    if size > MAX_ANSWER_CHARS:
        # Never sent back: the model is told the limit, not shown an answer that would crowd out the prompt.
        left_out = OVERSIZED_PLACEHOLDER.format(size=size, limit=MAX_ANSWER_CHARS)
        reply = AIMessage(content=left_out, tool_calls=[{**call, "args": {}} for call in reply.tool_calls],
                          invalid_tool_calls=[{**call, "args": "{}"} for call in reply.invalid_tool_calls])
    calls = [*reply.tool_calls, *reply.invalid_tool_calls]
    if method == "function_calling" and calls:
        # After a tool call, OpenAI's API requires a tool message answering it before anything else.
        return [reply, *[ToolMessage(content=text, tool_call_id=call["id"]) for call in calls if call.get("id")]]
    return [AIMessage(content=reply.text), HumanMessage(text)]


def cut_off(limit: int) -> tuple[list[BaseMessage], str]:
    """What the model is told after an answer cut off at `limit` output tokens: never its partial text (a
    partial tool call would be invalid to send back), only that it was cut off and the limit to stay within."""
    problem = (f"the answer was cut off at the output limit of {limit} tokens (reasoning included) before it "
               f"was complete; answer again, complete and within {limit} tokens: keep any reasoning and the "
               "explanation short")
    return [AIMessage(content=CUT_OFF_PLACEHOLDER), HumanMessage(f"That answer cannot be used: {problem}.")], problem


def one_line(text: object, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
