"""Record and replay: every exchange with a model goes to `RUN_DIR/llm.jsonl` (role, node, question key,
the full messages, the reply, what became of it, usage, latency); `ReplayLink` answers a later run's
requests from such a recording, by role and key, in the order they were recorded, and stops the run with
a one-line error on a request the recording has no answer for.

One JSON object per line, appended as each exchange ends, so a killed run keeps everything before the kill.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from pydantic import BaseModel, Field, ValidationError

from kernelblaster.graph.llm.exchange import (
    ExchangeHead,
    ExchangeRequest,
    RefusalKind,
    Reply,
    RequestFailed,
    RequestRefused,
)
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.tools.errors import UserFacingError

LLM_LOG = "llm.jsonl"
# answer: used; unusable: the answer was read and sent back with what is wrong; cut_off: stopped by the
# output limit; refused: the server refused the form of the request; failed: no reply.
ExchangeOutcome = Literal["answer", "unusable", "cut_off", "refused", "failed"]


class RecordedToolCall(BaseModel):
    id: str | None
    name: str
    arguments: str = Field(description="The arguments as the model wrote them (JSON text, valid or not)")
    error: str | None = Field(default=None, description="Why the arguments could not be read")


MessageRole = Literal["system", "user", "assistant", "tool"]
# LangChain's message types, in the OpenAI chat format's names
_MESSAGE_ROLES: dict[str, MessageRole] = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


class RecordedMessage(BaseModel):
    role: MessageRole
    content: str
    tool_calls: list[RecordedToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None


class RecordedReply(BaseModel):
    content: str
    tool_calls: list[RecordedToolCall] = Field(default_factory=list)
    finish_reason: str | None = None

    def message(self) -> AIMessage:
        valid = [{"name": c.name, "args": json.loads(c.arguments), "id": c.id, "type": "tool_call"}
                 for c in self.tool_calls if c.error is None]
        invalid = [{"name": c.name, "args": c.arguments, "id": c.id, "error": c.error, "type": "invalid_tool_call"}
                   for c in self.tool_calls if c.error is not None]
        return AIMessage(content=self.content, tool_calls=valid, invalid_tool_calls=invalid,
                         response_metadata={"finish_reason": self.finish_reason})


class ExchangeRecord(ExchangeHead):
    """One line of `llm.jsonl`."""

    time: datetime
    messages: list[RecordedMessage]
    outcome: ExchangeOutcome
    reply: RecordedReply | None = None
    problem: str | None = Field(default=None, description="Why the answer was not used, or the error")
    refused: RefusalKind | None = None
    usage: TokenUsage
    latency_s: float = 0.0
    replayed_from: str | None = None


class ExchangeRecorder:
    """Appends the exchanges of one run to its `llm.jsonl` (thread-safe)."""

    def __init__(self, path: Path, replayed_from: str | None = None) -> None:
        self.path = path
        self.replayed_from = replayed_from
        self._lock = threading.Lock()

    def record(self, request: ExchangeRequest, outcome: ExchangeOutcome, *, reply: Reply | None = None,
               problem: str | None = None, refused: RefusalKind | None = None) -> None:
        record = ExchangeRecord(
            **dict(request.head()), time=datetime.now(UTC),
            messages=[_recorded_message(m) for m in request.messages], outcome=outcome,
            reply=_recorded_reply(reply) if reply else None, problem=problem, refused=refused,
            usage=reply.usage if reply else TokenUsage(role=request.role, node=request.node, model=request.model,
                                                       input_tokens=0, output_tokens=0),
            latency_s=reply.latency_s if reply else 0.0, replayed_from=self.replayed_from)
        line = record.model_dump_json() + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as log:
                log.write(line)


def _recorded_message(message: BaseMessage) -> RecordedMessage:
    role = _MESSAGE_ROLES[message.type]
    calls = _recorded_calls(message) if isinstance(message, AIMessage) else []
    call_id = message.tool_call_id if isinstance(message, ToolMessage) else None
    return RecordedMessage(role=role, content=message.text, tool_calls=calls, tool_call_id=call_id)


def _recorded_reply(reply: Reply) -> RecordedReply:
    return RecordedReply(content=reply.message.text, tool_calls=_recorded_calls(reply.message),
                         finish_reason=reply.finish_reason)


def _recorded_calls(message: AIMessage) -> list[RecordedToolCall]:
    valid = [RecordedToolCall(id=c.get("id"), name=c["name"], arguments=json.dumps(c["args"]))
             for c in message.tool_calls]
    invalid = [RecordedToolCall(id=c.get("id"), name=c.get("name") or "", arguments=c.get("args") or "",
                                error=c.get("error") or "unreadable arguments")
               for c in message.invalid_tool_calls]
    return valid + invalid


def read_records(path: Path) -> list[ExchangeRecord]:
    """The exchanges of a `llm.jsonl`; a last line cut short by a kill is left out."""
    # Bytes, line by line: a line that is not UTF-8 is named like any other damaged line, and a kill that cut a
    # character short in the last line loses only that line.
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as error:
        raise UserFacingError(f"{path}: cannot read the recording ({error.strerror or error})") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(ExchangeRecord.model_validate_json(line))
        except ValidationError:
            if number == len(lines):  # no newline after it: a write the kill interrupted
                break
            raise UserFacingError(f"{path}:{number}: not a recorded exchange") from None
    return records


def recorded_tokens(path: Path) -> int:
    """The tokens a run has spent so far, from its recording."""
    return sum(record.usage.total for record in read_records(path)) if path.exists() else 0


def recording_to_replay(run_dir: Path) -> list[ExchangeRecord]:
    """The exchanges recorded in `run_dir`'s `llm.jsonl`, read whole; a one-line error naming the file if there
    is none, a line of it is damaged, or it holds no exchange (a replay of it could answer nothing)."""
    path = run_dir / LLM_LOG
    if not path.is_file():
        raise UserFacingError(f"--replay-from {run_dir}: no {LLM_LOG} there to replay (every run against an "
                              "endpoint records one)")
    records = read_records(path)
    if not records:
        raise UserFacingError(f"--replay-from {run_dir}: {path} holds no recorded exchange to replay")
    return records


class ReplayLink:
    """Answers requests from a recorded run: the exchanges of each (role, key), in their recorded order."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LLM_LOG
        self._pending: defaultdict[tuple[str, str], deque[ExchangeRecord]] = defaultdict(deque)
        for record in recording_to_replay(run_dir):
            self._pending[(record.role, record.key)].append(record)
        self._lock = threading.Lock()

    def send(self, request: ExchangeRequest) -> Reply:
        with self._lock:
            pending = self._pending[(request.role, request.key)]
            record = pending.popleft() if pending else None
        if record is None:
            raise UserFacingError(f"replay: {self.path} has no answer for the {request.role} prompt "
                                  f"{request.key} (request {request.attempt + 1}); it was recorded with other "
                                  "settings or stopped earlier")
        if record.outcome == "refused":
            raise RequestRefused(record.refused or "method", record.problem or "refused")
        if record.outcome == "failed" or record.reply is None:
            raise RequestFailed(record.problem or "no reply was recorded")
        usage = record.usage.model_copy(update={"role": request.role, "node": request.node, "model": request.model})
        return Reply(message=record.reply.message(), finish_reason=record.reply.finish_reason, usage=usage,
                     latency_s=record.latency_s)
