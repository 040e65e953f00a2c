"""DriverSession against a protocol test double (tests/fixtures/candidates/fake_driver_protocol.py).

The double replies with fixed values; these tests check what the session does with the process: the wire
format it writes, timeouts, crashes, error replies, stderr capture and output it must skip.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from kernelblaster.tools.driver_process import (
    DriverCrashed,
    DriverForged,
    DriverSession,
    DriverTimeout,
    ImpossibleReply,
    IpcTensor,
    TensorSet,
    parse_reply_line,
)

FAKE_DRIVER = Path(__file__).resolve().parents[1] / "fixtures" / "candidates" / "fake_driver_protocol.py"
HANDLE = "ab" * 64


def fake_session(behaviour: str = "answer", request_log: Path | None = None, **env: str) -> DriverSession:
    env = {"FAKE_DRIVER_BEHAVIOUR": behaviour, **env}
    if request_log is not None:
        env["FAKE_DRIVER_REQUEST_LOG"] = str(request_log)
    return DriverSession([str(FAKE_DRIVER)], wrapper=[sys.executable], sandbox=None, env=env)


def one_set() -> TensorSet:
    x = IpcTensor(handle_hex=HANDLE, offset=256, dtype=0, shape=[4, 8], strides=[8, 1])
    return TensorSet(inputs=[x], params=[], outputs=[x.model_copy(update={"offset": 512})])


def process_ended(pid: int, within_s: float = 5.0) -> bool:
    """True once `pid` is gone or a zombie (a container's init may never reap it), waiting up to `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_setup_sends_tensors_in_the_driver_wire_format(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with fake_session(request_log=log) as session:
        session.setup([one_set()], flush_bytes=100 << 20, device=1)
    setup = json.loads(log.read_text().splitlines()[0])
    assert setup["cmd"] == "setup" and setup["device"] == 1 and setup["flush_bytes"] == 100 << 20
    assert setup["seq"] == 1
    assert setup["sets"][0]["inputs"][0] == {
        "handle": HANDLE, "offset": 256, "dtype": 0, "shape": [4, 8], "strides": [8, 1],
    }  # fmt: skip
    assert setup["sets"][0]["outputs"][0]["offset"] == 512


def test_run_and_profile_name_the_set_with_the_key_set(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with fake_session(request_log=log) as session:
        session.run(2, timeout_s=10)
        session.profile(1, warmup=3, timeout_s=10)
    run, profile = (json.loads(line) for line in log.read_text().splitlines()[:2])
    assert run == {"cmd": "run", "set": 2, "seq": 1}
    assert profile == {"cmd": "profile", "warmup": 3, "set": 1, "seq": 2}


def test_batch_names_its_sets_in_order_with_the_key_sets(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with fake_session(request_log=log) as session:
        session.batch([2, 0, 1], timeout_s=10)
        session.batch([], timeout_s=10)
    first, empty = (json.loads(line) for line in log.read_text().splitlines()[:2])
    assert first == {"cmd": "batch", "sets": [2, 0, 1], "seq": 1}
    assert empty == {"cmd": "batch", "sets": [], "seq": 2}


def test_time_returns_one_event_sample_per_timed_call_and_the_escape_counts(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with fake_session(request_log=log) as session:
        timing = session.time(sets=[0, 1], warmup=2, iters=7, flush=True, timeout_s=10)
    assert len(timing.event_ms) == 7
    assert (timing.incomplete_calls, timing.policy_windows) == (0, 0)
    assert json.loads(log.read_text().splitlines()[0])["poison"] is True


def test_close_sends_exit_and_the_driver_ends_with_status_zero(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    session = fake_session(request_log=log)
    with session:
        session.run(0, timeout_s=10)
    assert json.loads(log.read_text().splitlines()[-1]) == {"cmd": "exit", "seq": 2}
    assert session.exit_status == 0


def test_a_request_without_reply_times_out_and_kills_the_process_group() -> None:
    session = fake_session("hang")
    with session, pytest.raises(DriverTimeout) as raised:
        session.run(0, timeout_s=1.0)
    child_line = next(line for line in raised.value.stderr_tail.splitlines() if line.startswith("child"))
    assert raised.value.command == "run"
    assert session.exit_status == -9
    assert process_ended(int(child_line.split()[1]))


def test_timeout_is_measured_per_request() -> None:
    with fake_session("hang") as session:
        started = time.monotonic()
        with pytest.raises(DriverTimeout):
            session.run(0, timeout_s=0.5)
        elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 3.0


def test_a_timeout_longer_than_poll_can_wait_still_gets_the_reply(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with fake_session(request_log=log) as session:
        session.run(0, timeout_s=30 * 24 * 3600.0)  # a month: more than one poll() can wait
    assert [json.loads(line)["cmd"] for line in log.read_text().splitlines()] == ["run", "exit"]


def test_a_process_that_dies_mid_request_raises_crashed_with_signal_and_stderr() -> None:
    with fake_session("die") as session, pytest.raises(DriverCrashed) as raised:
        session.run(0, timeout_s=10)
    assert raised.value.exit_status == -11
    assert "about to touch a bad address" in raised.value.stderr_tail
    assert "SIGSEGV" in str(raised.value)


def test_a_fatal_error_reply_raises_crashed_with_the_error_and_exit_status_3() -> None:
    with fake_session("cuda_error") as session, pytest.raises(DriverCrashed) as raised:
        session.run(0, timeout_s=10)
    assert raised.value.error.startswith("cudaErrorIllegalAddress")
    assert raised.value.exit_status == 3


def test_a_nonzero_kb_forward_return_is_reported_and_the_driver_keeps_serving() -> None:
    with fake_session("rc") as session:
        with pytest.raises(DriverCrashed) as raised:
            session.run(0, timeout_s=10)
        assert raised.value.rc == 7 and raised.value.exit_status is None
        timing = session.time(sets=[0], warmup=0, iters=1, flush=False, timeout_s=10)
    assert len(timing.event_ms) == 1


def test_megabytes_of_stderr_and_non_json_stdout_do_not_block_or_confuse_the_reply() -> None:
    with fake_session("chatty") as session:
        session.run(0, timeout_s=10)
    # The reply can overtake the last stderr bytes; the tail is complete once the session is closed.
    tail = session.stderr_tail()
    assert "last words" in tail
    assert "==PROF== Connected to process" in tail
    assert len(tail.encode()) <= 64 * 1024


def test_a_request_after_the_driver_died_raises_crashed() -> None:
    with fake_session("die") as session:
        with pytest.raises(DriverCrashed):
            session.run(0, timeout_s=10)
        with pytest.raises(DriverCrashed, match="no longer running"):
            session.time(sets=[0], warmup=0, iters=1, flush=False, timeout_s=10)


def test_ipc_tensor_rejects_a_handle_that_is_not_64_bytes_of_hex() -> None:
    with pytest.raises(ValueError, match="handle_hex"):
        IpcTensor(handle_hex="abc", offset=0, dtype=0, shape=[1], strides=[1])


def test_ipc_tensor_rejects_more_dimensions_than_kbtensor_holds() -> None:
    with pytest.raises(ValueError, match="at most 8"):
        IpcTensor(handle_hex=HANDLE, offset=0, dtype=0, shape=[1] * 9, strides=[1] * 9)


# ---------------------------------------------------------------------------------------------------
# Replies the driver cannot have sent
# ---------------------------------------------------------------------------------------------------
def test_a_second_reply_to_one_request_is_a_forgery() -> None:
    with pytest.raises(DriverForged, match="forged reply"), fake_session("twice") as session:
        session.run(0, timeout_s=10)
        session.run(0, timeout_s=10)


def test_a_result_the_harness_rejects_kills_the_driver_and_names_the_reason() -> None:
    with fake_session() as session:
        pid = session.pid
        forged = session.reject("a median below the harness's own clock")
        assert pid is not None and process_ended(pid)
    assert isinstance(forged, DriverForged) and forged.reason == "a median below the harness's own clock"


def test_a_reply_numbered_for_another_request_is_a_forgery_and_the_driver_is_killed() -> None:
    session = fake_session("renumbered")
    with session, pytest.raises(DriverForged, match="numbered 2 arrived while the driver owed reply 1"):
        session.run(0, timeout_s=10)
    assert session.exit_status == -9


def test_a_reply_that_arrives_before_its_request_is_a_forgery() -> None:
    with pytest.raises(DriverForged, match="forged reply"), fake_session("early") as session:
        session.run(0, timeout_s=10)
        time.sleep(0.3)
        session.run(0, timeout_s=10)


def test_a_reply_after_the_answer_to_exit_is_a_forgery() -> None:
    session = fake_session("late")
    session.start()
    with pytest.raises(DriverForged, match="after the driver's answer to 'exit'"):
        session.close()


def test_timed_calls_that_claim_more_time_than_passed_are_forged() -> None:
    session = fake_session(FAKE_DRIVER_TIME_MS="50", FAKE_DRIVER_TIME_SLEEP_S="0")
    with session, pytest.raises(DriverForged, match=r"10 calls claimed 500\.000 ms, but the whole request took"):
        session.time(sets=[0], warmup=0, iters=10, flush=True, timeout_s=10)


def test_timed_calls_whose_claims_fit_the_elapsed_time_are_accepted() -> None:
    with fake_session() as session:
        timing = session.time(sets=[0], warmup=5, iters=50, flush=True, timeout_s=10)
    assert len(timing.event_ms) == 50


def test_what_the_sandbox_blocked_is_read_from_the_launchers_report() -> None:
    with fake_session("blocked") as session, pytest.raises(DriverCrashed) as raised:
        session.run(0, timeout_s=10)
    assert session.blocked() == ["execve (the candidate tried to run another program)"]
    assert raised.value.exit_status == 159 and "stopped by the sandbox" in str(raised.value)


# ---------------------------------------------------------------------------------------------------
# Replies beyond what the driver sends: bounded before they are parsed
# ---------------------------------------------------------------------------------------------------
def test_a_deeply_nested_reply_is_a_forgery_not_a_failure_of_the_harness() -> None:
    session = fake_session("nested")
    with session, pytest.raises(DriverForged, match="objects and arrays, more than the 64 the driver ever sends"):
        session.run(0, timeout_s=10)
    assert session.exit_status == -9


def test_an_endless_line_on_the_protocol_is_a_forgery() -> None:
    with fake_session("overlong") as session, pytest.raises(DriverForged, match="a line of more than 4194304 bytes"):
        session.run(0, timeout_s=10)


def test_a_reply_with_fields_of_the_wrong_type_is_a_forgery() -> None:
    with fake_session("malformed") as session, pytest.raises(DriverForged, match="a malformed reply to 'run': ok: "):
        session.run(0, timeout_s=10)


def test_the_bounds_let_the_largest_honest_timing_reply_through() -> None:
    reply = {"seq": 3, "ok": True, "event_ms": [123.456789012345] * 1000, "incomplete_calls": 0, "policy_windows": 0}
    assert parse_reply_line(json.dumps(reply).encode()) == reply


def test_an_error_reply_quoting_bytes_that_are_not_utf8_is_read_at_once_as_text_a_result_can_hold() -> None:
    # A candidate's exception text is quoted byte for byte: the bytes of a lone surrogate became one (and the
    # result could not be written), a 0xFF byte made the reply unreadable (and the harness waited for its timeout).
    started = time.monotonic()
    with fake_session("error_bytes") as session, pytest.raises(DriverCrashed) as crashed:
        session.run(0, timeout_s=30)
    assert time.monotonic() - started < 10
    assert "kb_forward threw" in crashed.value.error and crashed.value.rc == -1
    str(crashed.value).encode("utf-8")  # strict: no lone surrogate left in it


def test_terminal_escape_sequences_a_candidate_prints_or_throws_reach_no_summary() -> None:
    with fake_session("terminal") as session, pytest.raises(DriverCrashed) as crashed:
        session.run(0, timeout_s=30)
    summary = str(crashed.value)
    assert "\x1b" not in summary and "\x07" not in summary
    assert "kb_forward threw \\x1b]52;c;b3duZWQ=\\x07" in summary and "\\x1b]0;owned" in summary


def test_a_reply_with_an_escaped_lone_surrogate_is_not_the_drivers() -> None:
    with pytest.raises(ImpossibleReply, match="lone surrogate"):
        parse_reply_line(b'{"seq": 3, "ok": false, "error": "\\ud800"}')


def test_a_line_that_is_not_an_object_is_not_a_reply_and_not_parsed() -> None:
    assert parse_reply_line(b"[" * 100_000) is None
    assert parse_reply_line(b"==PROF== Connected to process 12") is None


def test_output_without_end_between_replies_is_a_forgery_found_in_bounded_time() -> None:
    started = time.monotonic()
    with fake_session("endless") as session, pytest.raises(DriverForged, match="a line of more than"):
        session.run(0, timeout_s=10)
        session.run(0, timeout_s=10)
    assert time.monotonic() - started < 10


def test_the_reply_to_exit_is_read_even_when_the_driver_has_gone_by_then(monkeypatch: pytest.MonkeyPatch) -> None:
    # A loaded host: the driver answers `exit` and ends before this process reads the answer.
    expect_reply = DriverSession._expect_reply

    def read_late(self: DriverSession, command: str, seq: int, timeout_s: float) -> dict[str, object]:
        if command == "exit" and self._process is not None:
            self._process.wait(timeout=10)
        return expect_reply(self, command, seq, timeout_s)

    monkeypatch.setattr(DriverSession, "_expect_reply", read_late)
    with fake_session() as session:
        pass
    assert session.exit_status == 0
