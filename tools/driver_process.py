"""Runs the test driver of a built candidate and speaks its JSON line protocol.

The driver process is the launcher (harness/driver/kb_launcher.c) loading the driver's library and then
one candidate's (`DriverProgram`). It runs in the OS sandbox it is given (tools/sandbox.py; None
for --unsafe-no-sandbox), in its own process group, so a hang is ended by killing the group (sandbox and a
wrapper such as ncu included). Every request has a timeout; stderr is drained by a thread so a chatty
candidate never blocks the pipe, and its tail is attached to every failure. The protocol is documented in
harness/driver/kb_driver.cu.

Candidate code shares the driver's process and can write anything to any of its file descriptors, so what
arrives on the protocol is checked here, from outside, before it is believed:
- requests are numbered and every reply must echo its request's number: a reply that arrives before its
  request was sent, twice, or with another number is a forgery, and so is a reply after the driver's
  answer to `exit`;
- a timing reply is held against this process's own clock around the request (`forged_timing`): the
  claimed calls must fit in the time that passed. Claims too small are bounded by the harness's own batch
  clock instead (harness/timing.py): a check of unclaimed time here judged honest kernels forged whenever
  the host was busy (seen on two H200s of one host).
- a reply is read within bounds (`MAX_REPLY_LINE_BYTES` per line, `MAX_REPLY_CONTAINERS` objects and
  arrays, `MAX_REPLY_ELEMENTS` elements) before it is parsed, and must have the fields and types of the
  reply it answers: the trusted process never parses more than the driver can send, so a deeply nested or
  endless line cannot exhaust its stack or memory, and is a forgery like any reply the driver cannot send.
A forgery raises `DriverForged` (the driver is killed first). What the sandbox blocked (the launcher names
it on stderr before it ends the process) is listed by `blocked()`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError, model_validator

from kernelblaster.tools.sandbox import SANDBOX_TASKS, ResourceLimits, Sandbox, SandboxView, memory_share, prepare
from kernelblaster.tools.untrusted_text import LONE_SURROGATE, for_terminal

KB_MAX_DIMS = 8  # KBTensor's shape/strides capacity (harness/driver/kb_abi.h)
STDERR_TAIL_BYTES = 64 * 1024
START_TIMEOUT_S = 60.0  # loading the library and, under ncu, ncu's own start-up
EXIT_TIMEOUT_S = 10.0
WRAPPED_EXIT_TIMEOUT_S = 300.0  # a wrapper such as ncu writes its report after the driver exits
FATAL_EXIT_WAIT_S = 5.0
WRAPPED_FATAL_EXIT_WAIT_S = 60.0  # a wrapper (compute-sanitizer, ncu) writes its report after a crash too
# A long timeout (a slow kernel's timing request: its call timeout times the calls) is waited for in slices,
# as poll() overflows past about 24.8 days.
POLL_SLICE_S = 3600.0
BLOCKED_EXIT_STATUS = 159  # the launcher's status after a blocked system call (128 + SIGSYS)
# The largest reply the driver sends is a timing reply: a number per timed call (timing.MAX_ITERATIONS, 1000)
# and a short error text; these bounds leave a wide margin and stop what only a forger writes.
MAX_REPLY_LINE_BYTES = 4 << 20
MAX_REPLY_CONTAINERS = 64  # `{` and `[` in one reply, strings included (the driver's have 2)
MAX_REPLY_ELEMENTS = 1 << 18  # values in one reply, counted by separators
# How a driver ends after the filter refused a call: the launcher's status (also bwrap's for a SIGSYS death),
# or killed by SIGSYS itself (no bwrap in between).
SANDBOX_EXIT_STATUSES = frozenset({BLOCKED_EXIT_STATUS, -signal.SIGSYS})
# A backstop for the whole driver process; each request has its own wall-clock timeout.
DRIVER_LIMITS = ResourceLimits(file_bytes=1 << 30, tasks=SANDBOX_TASKS, data_bytes=memory_share(), cpu_seconds=3600)
NO_EXTRA_VIEW = SandboxView()
_BLOCKED_LINE = re.compile(r"^kernelblaster-sandbox: blocked (?P<what>.+)$", re.MULTILINE)


# ---------------------------------------------------------------------------------------------------
# The driver program
# ---------------------------------------------------------------------------------------------------
class DriverProgram(BaseModel):
    """The launcher (built once per machine) and the two libraries it loads: the driver's (built once per arch)
    and then the candidate's."""

    model_config = ConfigDict(frozen=True)

    launcher: Path
    driver: Path
    library: Path  # the candidate's
    library_dirs: tuple[Path, ...] = ()  # where the libraries they link (CUDA runtime, cuBLAS ...) are found

    def command(self, *, filtered: bool, limits: ResourceLimits = DRIVER_LIMITS) -> list[str]:
        """The argv that starts the driver; `filtered=False` leaves out the system-call filter."""
        options = [] if filtered else ["--no-filter"]
        options += ["--file-bytes", str(limits.file_bytes), "--tasks", str(limits.tasks),
                    "--data-bytes", str(limits.data_bytes)]
        if limits.cpu_seconds is not None:
            options += ["--cpu-seconds", str(limits.cpu_seconds)]
        return [str(self.launcher), *options, str(self.driver), str(self.library)]

    def view(self) -> SandboxView:
        """What the driver needs to see in a sandbox: itself, the GPU and the CUDA driver."""
        return SandboxView(read_only=(self.launcher, self.driver, self.library, *self.library_dirs), gpu=True)


# ---------------------------------------------------------------------------------------------------
# Tensor descriptors the Python harness fills from its CUDA allocations
# ---------------------------------------------------------------------------------------------------
class IpcTensor(BaseModel):
    """One tensor shared with the driver: an IPC handle of its allocation, the offset into it, its layout."""

    model_config = ConfigDict(frozen=True)

    handle_hex: str = Field(pattern=r"^[0-9a-fA-F]{128}$", serialization_alias="handle")
    offset: int = Field(ge=0)
    dtype: int = Field(ge=0)  # a KBDtype code
    shape: list[NonNegativeInt]
    strides: list[NonNegativeInt]  # in elements

    @model_validator(mode="after")
    def _layout_fits_kbtensor(self) -> IpcTensor:
        if len(self.shape) != len(self.strides) or len(self.shape) > KB_MAX_DIMS:
            raise ValueError(f"shape and strides must have the same length, at most {KB_MAX_DIMS}")
        return self


class TensorSet(BaseModel):
    """One complete argument bundle for kb_forward."""

    inputs: list[IpcTensor]
    params: list[IpcTensor]
    outputs: list[IpcTensor]


# ---------------------------------------------------------------------------------------------------
# Requests and replies
# ---------------------------------------------------------------------------------------------------
class SetupRequest(BaseModel):
    cmd: Literal["setup"] = "setup"
    device: int = Field(ge=0)
    flush_bytes: int = Field(ge=0)
    sets: list[TensorSet] = Field(min_length=1)
    # Under compute-sanitizer's initcheck: make the IPC-mapped inputs and parameters count as written
    mark_initialized: bool = False


class RunRequest(BaseModel):
    cmd: Literal["run"] = "run"
    set_index: int = Field(ge=0, serialization_alias="set")


class BatchRequest(BaseModel):
    cmd: Literal["batch"] = "batch"
    sets: list[int] = Field(default_factory=list)


class TimeRequest(BaseModel):
    cmd: Literal["time"] = "time"
    warmup: int = Field(ge=0)
    iters: int = Field(ge=1)
    sets: list[int] = Field(min_length=1)
    flush: bool
    poison: bool


class ProfileRequest(BaseModel):
    cmd: Literal["profile"] = "profile"
    warmup: int = Field(ge=0)
    set_index: int = Field(ge=0, serialization_alias="set")


class ExitRequest(BaseModel):
    cmd: Literal["exit"] = "exit"


DriverRequest = SetupRequest | RunRequest | BatchRequest | TimeRequest | ProfileRequest | ExitRequest


class DriverReply(BaseModel):
    """Every reply: `ok`, and on failure the error, whether the driver exits after it, and kb_forward's rc."""

    ok: bool
    seq: int | None = None
    error: str | None = None
    fatal: bool = False
    rc: int | None = None


class BatchReply(DriverReply):
    """The calls a batch made (one per listed set)."""

    calls: int = Field(ge=0)


class TimingReply(DriverReply):
    """Per timed call, the GPU milliseconds between events on the stream around kb_forward; over all calls
    (warm-up included), how many still changed their outputs after the stream had finished (work escaped the
    stream) and how many left an L2 access-policy window on the stream (cleared before the next call)."""

    event_ms: list[float]
    incomplete_calls: int
    policy_windows: int


ReplyT = TypeVar("ReplyT", bound=DriverReply)


# ---------------------------------------------------------------------------------------------------
# Failures
# ---------------------------------------------------------------------------------------------------
class DriverError(Exception):
    """The driver could not answer a request; `stderr_tail` is what the process printed last."""

    def __init__(self, summary: str, stderr_tail: str) -> None:
        self.stderr_tail = stderr_tail
        last_lines = " | ".join(stderr_tail.strip().splitlines()[-5:])
        super().__init__(for_terminal(summary) + (f"; stderr: {last_lines[-600:]}" if last_lines else ""))

    @property
    def blocked(self) -> list[str]:
        """What the sandbox stopped before the driver ended, as the launcher named it, or, when the process
        ended as the launcher ends it after a refused call (status 159, or killed by SIGSYS: a candidate that
        blocked SIGSYS is killed by the kernel before the launcher can name the call) without a name, one
        entry saying so."""
        named = blocked_calls(self.stderr_tail)
        if named or not (isinstance(self, DriverCrashed) and self.exit_status in SANDBOX_EXIT_STATUSES):
            return named
        return ["a forbidden system call (the candidate kept the launcher from naming it)"]


class DriverTimeout(DriverError):
    """A request got no reply in time; the driver's process group has been killed."""

    def __init__(self, command: str, timeout_s: float, stderr_tail: str) -> None:
        self.command = command
        self.timeout_s = timeout_s
        super().__init__(f"no reply to '{command}' within {timeout_s:g} s; the driver was killed", stderr_tail)


class DriverCrashed(DriverError):
    """The driver died, or answered with an error (a CUDA error, kb_forward's nonzero rc, a bad request)."""

    def __init__(self, error: str, exit_status: int | None, stderr_tail: str, rc: int | None = None) -> None:
        self.error = for_terminal(error)
        self.exit_status = exit_status
        self.rc = rc
        super().__init__(error + _describe_exit(exit_status), stderr_tail)


class DriverForged(DriverError):
    """What arrived on the protocol cannot be the driver's own answer; the driver has been killed."""

    def __init__(self, reason: str, stderr_tail: str) -> None:
        self.reason = reason
        super().__init__(f"forged reply: {reason}", stderr_tail)


def blocked_calls(stderr: str) -> list[str]:
    """The system calls the launcher reported blocking in `stderr` (the driver's output), in order, once each."""
    return list(dict.fromkeys(match["what"] for match in _BLOCKED_LINE.finditer(stderr)))


def _describe_exit(exit_status: int | None) -> str:
    if exit_status is None:
        return ""
    if exit_status in SANDBOX_EXIT_STATUSES:
        return f" (driver stopped by the sandbox, status {exit_status})"
    if exit_status < 0:
        return f" (driver killed by {signal.Signals(-exit_status).name})"
    return f" (driver exited with status {exit_status})"


CLAIM_SLACK_SHARE = 0.01  # clocks of two processes disagree a little
CLAIM_SLACK_MS = 1.0


def forged_timing(request: TimeRequest, reply: TimingReply, elapsed_ms: float) -> str | None:
    """Why a timing reply cannot be true, given the wall time this process saw the request take; None if
    it can."""
    calls = request.warmup + request.iters
    if len(reply.event_ms) != request.iters:
        return f"{len(reply.event_ms)} timed calls reported for a request of {request.iters}"
    if not all(math.isfinite(x) and x >= 0 for x in reply.event_ms):
        return "timings that are negative or not numbers"
    if not (0 <= reply.incomplete_calls <= calls and 0 <= reply.policy_windows <= calls):
        return f"counts of calls beyond the {calls} calls made"
    claimed_ms = sum(reply.event_ms)
    if claimed_ms > elapsed_ms * (1 + CLAIM_SLACK_SHARE) + CLAIM_SLACK_MS:
        return (f"{request.iters} calls claimed {claimed_ms:.3f} ms, but the whole request took {elapsed_ms:.3f} ms "
                "by the harness's clock")
    return None


# ---------------------------------------------------------------------------------------------------
# The session
# ---------------------------------------------------------------------------------------------------
class DriverSession:
    """One driver process for one candidate; use as a context manager."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        sandbox: Sandbox | None,
        view: SandboxView = NO_EXTRA_VIEW,
        wrapper: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        exit_timeout_s: float | None = None,
        pass_fds: Sequence[int] = (),
    ) -> None:
        """`command` starts the driver (`DriverProgram.command`); `wrapper` prefixes it (e.g. ncu's argv).

        It runs inside `sandbox` seeing `view` (None: unconfined), with the sandbox's emptied environment
        plus `env`. `exit_timeout_s` bounds the wait for a clean exit on close (default 10 s, 300 s under
        a wrapper). `pass_fds` are descriptors the
        process inherits (the sandbox keeps their numbers): a pipe a wrapper writes its report into.
        """
        self.argv = [*wrapper, *command]
        self._launch = prepare(self.argv, view, sandbox, env=env)
        default_exit_timeout_s = WRAPPED_EXIT_TIMEOUT_S if wrapper else EXIT_TIMEOUT_S
        self._exit_timeout_s = exit_timeout_s if exit_timeout_s is not None else default_exit_timeout_s
        self._fatal_exit_wait_s = WRAPPED_FATAL_EXIT_WAIT_S if wrapper else FATAL_EXIT_WAIT_S
        self._pass_fds = tuple(pass_fds)
        self._process: subprocess.Popen[bytes] | None = None
        self._stdout_buffer = b""
        self._tail = _OutputTail(STDERR_TAIL_BYTES)
        self._stderr_reader: threading.Thread | None = None
        self._next_seq = 1

    # -- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close(check=exc is None)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the driver and wait until it has loaded (its reply numbered 0)."""
        self._process = subprocess.Popen(
            self._launch.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._launch.env,
            cwd=self._launch.cwd,
            pass_fds=self._pass_fds,
            start_new_session=True,  # its own process group, killed as a whole on a hang
        )
        assert self._process.stderr is not None
        self._stderr_reader = threading.Thread(
            target=self._tail.drain, args=(self._process.stderr.fileno(),), name="driver-stderr", daemon=True
        )
        self._stderr_reader.start()
        self._expect_reply("start", 0, timeout_s)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def exit_status(self) -> int | None:
        """The exit status once the process has ended (negative: killed by that signal)."""
        return self._process.poll() if self._process is not None else None

    def stderr_tail(self) -> str:
        return self._tail.text()

    def blocked(self) -> list[str]:
        """What the sandbox stopped, as the launcher named it (e.g. `execve (the candidate tried to ...)`)."""
        return blocked_calls(self.stderr_tail())

    def close(self, check: bool = True) -> None:
        """Ask the driver to exit; kill its process group if it does not. Safe to call more than once.

        With `check`, a driver that does not answer `exit` raises DriverCrashed, and replies that follow
        its answer raise DriverForged.
        """
        process = self._process
        if process is None:
            return
        failure: DriverError | None = None
        if process.poll() is None:
            try:
                self._request(ExitRequest(), DriverReply, self._exit_timeout_s)
                process.wait(timeout=self._exit_timeout_s)
                self._reject_late_replies()
            except DriverError as error:
                failure = error
            except subprocess.TimeoutExpired:
                self._kill()
        self._finish()
        if check and failure is not None:
            raise failure

    def interrupt(self) -> None:
        """Kill the driver's process group from another thread (a watcher that has seen enough); the request
        waiting for a reply then fails as a driver that exited without replying."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)

    # -- requests -------------------------------------------------------------------------------------
    def setup(self, sets: list[TensorSet], flush_bytes: int, device: int = 0, timeout_s: float = 60.0,
              mark_initialized: bool = False) -> None:
        """Map every tensor set through IPC; `flush_bytes` sizes the L2 flush buffer (2x the L2 size).
        `mark_initialized` is for initcheck, which otherwise sees every input as never written."""
        self._request(SetupRequest(device=device, flush_bytes=flush_bytes, sets=sets,
                                   mark_initialized=mark_initialized), DriverReply, timeout_s)

    def run(self, set_index: int, timeout_s: float) -> None:
        """One kb_forward call on a tensor set, synchronised and checked for CUDA errors."""
        self._request(RunRequest(set_index=set_index), DriverReply, timeout_s)

    def batch(self, sets: list[int], timeout_s: float) -> None:
        """One call per listed set, back to back, then one device-wide synchronise (an empty list: only the
        synchronise). The caller clocks it (harness/timing.py): nothing in the reply is a time."""
        reply = self._request(BatchRequest(sets=sets), BatchReply, timeout_s)
        if reply.calls != len(sets):
            raise self._forged(f"a batch of {len(sets)} calls was answered as {reply.calls} calls")

    def reject(self, reason: str) -> DriverForged:
        """Kill the driver for a result the harness found to be forged (its own measurements contradict the
        driver's claims); the caller raises what this returns."""
        return self._forged(reason)

    def time(self, sets: list[int], warmup: int, iters: int, flush: bool, timeout_s: float,
             poison: bool = True) -> TimingReply:
        """`iters` timed calls after `warmup` untimed ones, rotating over `sets`, with an L2 flush (and, with
        `poison`, the outputs poisoned) before each.

        The reply is checked against this process's clock around the request (`forged_timing`).
        """
        request = TimeRequest(warmup=warmup, iters=iters, sets=sets, flush=flush, poison=poison)
        started = time.perf_counter()
        reply = self._request(request, TimingReply, timeout_s)
        reason = forged_timing(request, reply, (time.perf_counter() - started) * 1000)
        if reason is not None:
            raise self._forged(reason)
        return reply

    def profile(self, set_index: int, warmup: int, timeout_s: float) -> None:
        """`warmup` calls, then one call between cudaProfilerStart/Stop (for `ncu --profile-from-start off`)."""
        self._request(ProfileRequest(set_index=set_index, warmup=warmup), DriverReply, timeout_s)

    def _request(self, request: DriverRequest, reply_type: type[ReplyT], timeout_s: float) -> ReplyT:
        process = self._running_process()
        assert process.stdin is not None
        seq = self._next_seq
        self._next_seq += 1
        self._reject_early_replies(request.cmd)
        wire = request.model_dump(by_alias=True) | {"seq": seq}
        try:
            process.stdin.write(json.dumps(wire).encode() + b"\n")
            process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(request.cmd) from None
        raw = self._expect_reply(request.cmd, seq, timeout_s)
        try:
            reply = DriverReply.model_validate(raw)
        except ValidationError as error:
            raise self._forged(f"a malformed reply to '{request.cmd}': {_first_error(error)}") from None
        if not reply.ok:
            if reply.fatal:
                self._wait_for_exit(self._fatal_exit_wait_s)
            raise DriverCrashed(
                reply.error or "the driver reported an error", self.exit_status, self.stderr_tail(), reply.rc
            )
        try:
            return reply_type.model_validate(raw)
        except ValidationError as error:
            raise self._forged(f"a malformed reply to '{request.cmd}': {_first_error(error)}") from None

    def _expect_reply(self, command: str, seq: int, timeout_s: float) -> dict[str, object]:
        """The next reply, which must be numbered `seq`."""
        raw = self._read_reply(command, timeout_s)
        if raw.get("seq") != seq:
            raise self._forged(f"a reply numbered {raw.get('seq')!r} arrived while the driver owed reply {seq} "
                               f"(to '{command}')")
        return raw

    def _reject_early_replies(self, command: str) -> None:
        """Nothing may be waiting on the protocol before a request is sent: no reply precedes its request."""
        for line in self._available_lines():
            if self._parse_reply_line(line) is not None:
                raise self._forged(f"a reply arrived before request '{command}' was sent: {line[:200]!r}")
            self._tail.append(line + b"\n")

    def _reject_late_replies(self) -> None:
        """After its answer to `exit` the driver (now ended) has written nothing more on the protocol."""
        self._stdout_buffer += b"\n"  # a last line without its newline counts too
        for line in self._available_lines():
            if self._parse_reply_line(line) is not None:
                raise self._forged(f"a reply arrived after the driver's answer to 'exit': {line[:200]!r}")

    def _available_lines(self) -> list[bytes]:
        """Complete lines already received or readable now, without waiting."""
        assert self._process is not None and self._process.stdout is not None
        stdout_fd = self._process.stdout.fileno()
        poller = select.poll()
        poller.register(stdout_fd, select.POLLIN)
        # At most a line's worth: a candidate that writes without end must not keep this loop, or the buffer,
        # growing (a longer line is a forgery, raised below).
        while len(self._stdout_buffer) <= MAX_REPLY_LINE_BYTES and poller.poll(0):
            chunk = os.read(stdout_fd, 65536)
            if not chunk:
                break
            self._stdout_buffer += chunk
        lines = []
        while (line := self._next_stdout_line()) is not None:
            lines.append(line)
        return lines

    def _parse_reply_line(self, line: bytes) -> dict[str, object] | None:
        """The line as a reply object, or None when it is not one (e.g. `==PROF==` lines from ncu); a line
        that opens a JSON object but is beyond what the driver sends is a forgery."""
        try:
            return parse_reply_line(line)
        except ImpossibleReply as error:
            raise self._forged(str(error)) from None

    def _forged(self, reason: str) -> DriverForged:
        if self._process is not None and self._process.poll() is None:
            self._kill()
        return DriverForged(reason, self.stderr_tail())

    def _running_process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise DriverCrashed("the driver session was never started", None, "")
        if self._process.poll() is not None:
            raise DriverCrashed("the driver is no longer running", self._process.returncode, self.stderr_tail())
        return self._process

    def _read_reply(self, command: str, timeout_s: float) -> dict[str, object]:
        """The next JSON object line on stdout; other lines (a wrapper's own output) go to the tail. The driver
        may have exited since it wrote its reply (it answers `exit` and goes): what it wrote is read all the
        same, and only an end of the pipe with no reply is its death."""
        process = self._process
        if process is None:
            raise DriverCrashed("the driver session was never started", None, "")
        assert process.stdout is not None
        stdout_fd = process.stdout.fileno()
        poller = select.poll()  # not select(): a long-lived harness may hold file descriptors above 1024
        poller.register(stdout_fd, select.POLLIN)
        deadline = time.monotonic() + timeout_s
        while True:
            line = self._next_stdout_line()
            if line is not None:
                reply = self._parse_reply_line(line)
                if reply is not None:
                    return reply
                self._tail.append(line + b"\n")
                continue
            remaining_s = max(0.0, deadline - time.monotonic())
            if not poller.poll(min(remaining_s, POLL_SLICE_S) * 1000):
                if time.monotonic() < deadline:
                    continue
                self._kill()
                raise DriverTimeout(command, timeout_s, self.stderr_tail())
            chunk = os.read(stdout_fd, 65536)
            if not chunk:
                raise self._died(command)
            self._stdout_buffer += chunk

    def _next_stdout_line(self) -> bytes | None:
        newline = self._stdout_buffer.find(b"\n", 0, MAX_REPLY_LINE_BYTES + 1)
        if newline < 0:
            if len(self._stdout_buffer) > MAX_REPLY_LINE_BYTES:
                raise self._forged(f"a line of more than {MAX_REPLY_LINE_BYTES} bytes on the protocol")
            return None
        line, self._stdout_buffer = self._stdout_buffer[:newline], self._stdout_buffer[newline + 1 :]
        return line

    def _died(self, command: str) -> DriverCrashed:
        self._wait_for_exit(self._fatal_exit_wait_s)
        bound = self._launch.bound
        return DriverCrashed(f"the driver exited without replying to '{command}'{bound.killed_note() if bound else ''}",
                             self.exit_status, self.stderr_tail())

    def _wait_for_exit(self, timeout_s: float) -> None:
        """Give a driver that is going down time to exit, then kill whatever is left of its group."""
        assert self._process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=timeout_s)
        self._kill()

    def _kill(self) -> None:
        """Kill the driver's whole process group (children, a wrapper and the sandbox included) and reap it."""
        assert self._process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._join_stderr()

    def _join_stderr(self) -> None:
        if self._stderr_reader is not None:
            self._stderr_reader.join(timeout=2.0)

    def _finish(self) -> None:
        assert self._process is not None
        self._join_stderr()
        for stream in (self._process.stdin, self._process.stdout, self._process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class ImpossibleReply(ValueError):
    """A line that opens a JSON object but holds what no reply of the driver holds."""


class OversizedReply(ImpossibleReply):
    """A line that opens a JSON object but exceeds what any reply of the driver holds."""


def _holds_surrogate(value: object) -> bool:
    """Whether a parsed reply holds a lone surrogate anywhere (a string no UTF-8 output can carry)."""
    if isinstance(value, str):
        return LONE_SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_holds_surrogate(key) or _holds_surrogate(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_surrogate(item) for item in value)
    return False


def parse_reply_line(line: bytes) -> dict[str, object] | None:
    """The line as a reply object, or None when it is not one (e.g. `==PROF==` lines from ncu).

    Only a line within the bounds is handed to the JSON parser: its length, its count of `{` and `[` (which
    bounds the nesting depth, so the parser cannot recurse deeply) and of separators (which bounds the
    values), strings included: counting them is linear whatever the line holds. A line that opens an object
    beyond them raises OversizedReply.

    Its text reaches results, logs and prompts (an error reply quotes the candidate's exception), so it is read
    as UTF-8 with undecodable bytes replaced: the JSON reader would otherwise turn the bytes of a lone surrogate
    into one (a string no result can be written with), and fail on other bytes, so that a genuine reply went
    unread until the request timed out. A `\\ud800`-style escape, which the driver never writes, is an
    ImpossibleReply.
    """
    text = line.strip()
    if not text.startswith(b"{"):
        return None
    if len(text) > MAX_REPLY_LINE_BYTES:
        raise OversizedReply(f"a reply line of {len(text)} bytes, more than the {MAX_REPLY_LINE_BYTES} the driver "
                             "ever sends")
    containers = text.count(b"{") + text.count(b"[")
    if containers > MAX_REPLY_CONTAINERS:
        raise OversizedReply(f"a reply holding {containers} objects and arrays, more than the "
                             f"{MAX_REPLY_CONTAINERS} the driver ever sends")
    elements = text.count(b",") + text.count(b":")
    if elements > MAX_REPLY_ELEMENTS:
        raise OversizedReply(f"a reply of {elements} values, more than the {MAX_REPLY_ELEMENTS} the driver ever "
                             "sends")
    try:
        value = json.loads(text.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    if not (isinstance(value, dict) and "ok" in value):
        return None
    if _holds_surrogate(value):
        raise ImpossibleReply("a reply holding a lone surrogate, an escape the driver never writes")
    return value


def _first_error(error: ValidationError) -> str:
    """A validation error in one line: where and what, never the (candidate-written) value itself."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the reply"
    return f"{where}: {first['msg']}"


class _OutputTail:
    """The last `limit` bytes of the driver's diagnostic output, filled by a reader thread."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data = bytearray()
        self._lock = threading.Lock()

    def drain(self, fd: int) -> None:
        while chunk := os.read(fd, 65536):
            self.append(chunk)

    def append(self, chunk: bytes) -> None:
        with self._lock:
            self._data += chunk
            del self._data[: max(0, len(self._data) - self._limit)]

    def text(self) -> str:
        with self._lock:
            return for_terminal(self._data.decode(errors="replace"))
