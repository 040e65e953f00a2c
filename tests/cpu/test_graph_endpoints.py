"""Whole runs against a local OpenAI-compatible server with the quirks of real ones (tests/fixtures/graph/
fake_openai.py): each run ends with a kernel, having met the quirk the way the endpoint layer promises.
Plus the waits of rate-limited requests, and the request gate shared by every run of the process."""

from __future__ import annotations

import json
import logging
import socket
import threading
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from fixtures.graph.fake_openai import (
    DECOY,
    REASONING_TOKENS,
    STALL_S,
    FakeOpenAI,
    Quirk,
    kernelblaster_roles,
    optimize_through,
)
from fixtures.graph.recorded_evaluator import EvaluationLog, SimulatedCrash, recorded_evaluators
from fixtures.graph.scenario import PROBLEM, small_context
from fixtures.graph.scripted_chat import connection_error

from kernelblaster.graph.app import api
from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.services import RunResources, Services
from kernelblaster.graph.llm.agents import AgentFailed, Answer, Question
from kernelblaster.graph.llm.endpoint import RetryPolicy, connection_refused
from kernelblaster.graph.llm.roles import Role
from kernelblaster.nodes.kernels import SoftVerdict
from kernelblaster.tools.errors import UserFacingError


def _ended_with_a_kernel(outcome: api.RunOutcome) -> None:
    assert outcome.status == "finished" and outcome.best_source is not None


def _records(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "run" / "llm.jsonl").read_text().splitlines()]


def test_a_server_without_tool_calling_falls_back_once_per_run_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), FakeOpenAI(kernelblaster_roles,
                                                      quirks=["refuse_tools", "refuse_json_schema"]) as server:
        outcome = optimize_through(server, tmp_path)
    _ended_with_a_kernel(outcome)
    forms = [request.form for request in server.requests]
    assert (forms.count("tools"), forms.count("json_schema")) == (1, 1)
    assert forms.count("json_object") >= 5
    assert [r.status for r in server.requests].count(400) == 2
    warnings = "\n".join(record.getMessage() for record in caplog.records)
    assert "refused structured output by function_calling" in warnings
    assert "answers are asked for by json_mode for the rest of this run" in warnings
    remembered = json.loads((tmp_path / "run" / "endpoint.json").read_text())["models"]["gpt-4.1"]
    assert (remembered["method"], remembered["confirmed"]) == ("json_mode", True)


def test_a_resumed_run_uses_the_method_found_before_the_crash_without_probing_again(tmp_path: Path) -> None:
    log = EvaluationLog(crash_at_measurement=2)
    with FakeOpenAI(kernelblaster_roles, quirks=["refuse_tools"]) as server:
        with pytest.raises(SimulatedCrash):
            optimize_through(server, tmp_path, log)
        before_the_crash = len(server.requests)
        outcome = api.resume(tmp_path / "run", services=Services(evaluators=recorded_evaluators(log)))
    _ended_with_a_kernel(outcome)
    after = server.requests[before_the_crash:]
    assert after and {request.form for request in after} == {"json_schema"}
    assert [request.form for request in server.requests].count("tools") == 1


def test_a_rate_limited_request_waits_as_long_as_retry_after_asks(tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles, quirks=["rate_limit"]) as server:
        outcome = optimize_through(server, tmp_path)
    _ended_with_a_kernel(outcome)
    limited, retried = server.requests[:2]
    assert (limited.status, retried.status) == (429, 200)
    assert retried.arrived - limited.answered >= 0.95


def _rate_limited(headers: dict[str, str]) -> openai.RateLimitError:
    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    return openai.RateLimitError("slow down", response=httpx2.Response(429, headers=headers, request=request),
                                 body=None)


def test_a_retry_after_longer_than_the_longest_wait_is_cut_to_it() -> None:
    policy = RetryPolicy(retries=3, max_wait_s=2.0)
    assert policy.wait_s(_rate_limited({"retry-after": "3600"}), retry=0) == 2.0
    assert policy.wait_s(_rate_limited({"retry-after-ms": "250"}), retry=0) == 0.25


def test_without_retry_after_the_wait_doubles_up_to_the_longest_wait() -> None:
    policy = RetryPolicy(retries=10, max_wait_s=3.0)
    waits = [policy.wait_s(_rate_limited({}), retry=retry) for retry in range(5)]
    assert 0.375 <= waits[0] <= 0.5 and 1.5 <= waits[2] <= 2.0 and waits[4] <= 3.0


def _ask_through(server: FakeOpenAI, tmp_path: Path, *, llm_retries: int) -> Answer[SoftVerdict]:
    context = RunContext(base_url=server.base_url, run_dir=str(tmp_path / "run"), llm_retries=llm_retries)
    resources = Services().for_run(context, str(PROBLEM), str(tmp_path / "run"))
    return resources.ask(_verdict_question("q"))


def test_an_overloaded_server_is_retried_a_bounded_number_of_times_then_the_call_fails(tmp_path: Path) -> None:
    with (FakeOpenAI(kernelblaster_roles, quirks=["overloaded"]) as server,
          pytest.raises(AgentFailed, match="the LLM request failed: no answer after 3 tries")):
        _ask_through(server, tmp_path, llm_retries=2)
    assert [request.status for request in server.requests] == [503, 503, 503]


@pytest.mark.parametrize("quirk", ["bad_key", "no_quota"])
def test_an_error_no_retry_can_fix_stops_the_run_in_one_line_after_one_request(quirk: Quirk, tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles, quirks=[quirk]) as server, pytest.raises(UserFacingError) as stopped:
        _ask_through(server, tmp_path, llm_retries=3)
    assert len(server.requests) == 1
    assert "\n" not in str(stopped.value) and server.base_url in str(stopped.value)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_endpoint_stops_the_run_in_one_line_and_the_run_resumes_once_it_answers(tmp_path: Path) -> None:
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}/v1"
    context = small_context(tmp_path, base_url=endpoint, depth=1, llm_retries=1, llm_outage_s=1.5, llm_timeout_s=10.0)
    with pytest.raises(UserFacingError) as stopped:
        api.optimize(PROBLEM, context, services=Services(evaluators=recorded_evaluators(EvaluationLog())))
    assert "\n" not in str(stopped.value) and f"the LLM endpoint {endpoint} cannot be reached" in str(stopped.value)
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "failed" and "cannot be reached" in status["reason"]
    with FakeOpenAI(kernelblaster_roles, port=port):
        outcome = api.resume(tmp_path / "run", services=Services(evaluators=recorded_evaluators(EvaluationLog())))
    _ended_with_a_kernel(outcome)


def test_a_connection_dropped_mid_answer_is_a_failed_request_not_an_unreachable_endpoint() -> None:
    dropped = openai.APIConnectionError(request=httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions"))
    dropped.__cause__ = httpx2.RemoteProtocolError("Server disconnected without sending a response.")
    assert not connection_refused(dropped)
    assert connection_refused(connection_error())


def test_an_answer_cut_off_at_the_output_limit_is_asked_for_again_naming_the_limit(tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles, quirks=["cut_off"]) as server:
        outcome = optimize_through(server, tmp_path, max_output_tokens=3000)
    _ended_with_a_kernel(outcome)
    cut, retried = [request for request in server.requests if request.schema_name is None][:2]
    assert cut.body["max_completion_tokens"] == 3000
    assert "cut off at the output limit of 3000 tokens" in retried.body["messages"][-1]["content"]
    assert [r["outcome"] for r in _records(tmp_path) if r["node"] == "write_initial"] == ["cut_off", "answer"]


def test_reasoning_is_kept_out_of_the_answers_and_counted_in_the_tokens(tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles, quirks=["reasoning"]) as server:
        outcome = optimize_through(server, tmp_path)
    _ended_with_a_kernel(outcome)
    kernels = [path.read_text() for path in (tmp_path / "run" / "kernels").glob("*.cu")]
    assert kernels and not any("RECORDED: incorrect" in source for source in kernels)
    assert all(DECOY not in str(record["reply"]) for record in _records(tmp_path))
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    reasoning = sum(total["reasoning_tokens"] for total in report["tokens"])
    assert reasoning == REASONING_TOKENS * len(server.requests)
    assert sum(total["output_tokens"] for total in report["tokens"]) > reasoning
    assert not any("temperature" in request.body for request in server.requests)


def test_a_refused_temperature_is_dropped_for_the_rest_of_the_run(tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles, quirks=["refuse_temperature"]) as server:
        outcome = optimize_through(server, tmp_path, temperature=0.2)
    _ended_with_a_kernel(outcome)
    with_temperature = [request for request in server.requests if "temperature" in request.body]
    assert [request.status for request in with_temperature] == [400]


def test_malformed_json_is_sent_back_to_the_model_with_the_error(tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles, quirks=["malformed_json"]) as server:
        outcome = optimize_through(server, tmp_path)
    _ended_with_a_kernel(outcome)
    _, retried = [request for request in server.requests if request.form == "tools"][:2]
    assert "arguments are not valid JSON" in retried.body["messages"][-1]["content"]
    assert retried.body["messages"][-1]["role"] == "tool"


def test_code_without_a_fenced_block_is_sent_back_saying_so(tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles, quirks=["unfenced_code"]) as server:
        outcome = optimize_through(server, tmp_path)
    _ended_with_a_kernel(outcome)
    _, retried = [request for request in server.requests if request.schema_name is None][:2]
    assert "there is no ```cuda code block" in retried.body["messages"][-1]["content"]


def test_a_stalled_request_times_out_and_is_retried_without_waiting_for_the_stall(tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles, quirks=["stall"]) as server:
        outcome = optimize_through(server, tmp_path, llm_timeout_s=1.0)
        stalled, retried = server.requests[:2]
    _ended_with_a_kernel(outcome)
    assert 1.0 <= retried.arrived - stalled.arrived < STALL_S


def _verdict_question(key: str, role: Role = "soft_verifier") -> Question[SoftVerdict]:
    return Question(role=role, node="verify", key=key, schema=SoftVerdict, system="You review kernels.",
                    user="Is it faithful?")


def test_requests_in_flight_never_exceed_the_endpoint_limit_across_runs_and_roles(tmp_path: Path) -> None:
    with FakeOpenAI(kernelblaster_roles, latency_s=0.3) as server:
        asks: list[tuple[RunResources, Role]] = []
        roles: tuple[Role, ...] = ("soft_verifier", "state_extractor")
        for run in ("first", "second"):
            context = RunContext(base_url=server.base_url, max_concurrent_requests=2, run_dir=str(tmp_path / run))
            resources = Services().for_run(context, str(PROBLEM), str(tmp_path / run))
            asks += [(resources, role) for role in roles]
        threads = [threading.Thread(target=resources.ask, args=(_verdict_question(f"q{n}", role),))
                   for n, (resources, role) in enumerate(asks * 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert len(server.requests) == 8
    assert server.most_in_flight == 2
