"""Runs a built candidate executable (the C++ test driver) and speaks its JSON line protocol.

The driver runs in its own process group, so a hang is ended by killing the group (wrapper such as ncu
included). Every request has a timeout; stderr is drained by a thread so a chatty candidate never blocks
the pipe, and its tail is attached to every failure. The protocol is documented in
harness/driver/kb_driver.cu.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

KB_MAX_DIMS = 8  # KBTensor's shape/strides capacity (harness/driver/kb_abi.h)
STDERR_TAIL_BYTES = 64 * 1024
EXIT_TIMEOUT_S = 10.0
WRAPPED_EXIT_TIMEOUT_S = 300.0  # a wrapper such as ncu writes its report after the driver exits
FATAL_EXIT_WAIT_S = 5.0


# ---------------------------------------------------------------------------------------------------
# Tensor descriptors the Python harness fills from its CUDA allocations
# ---------------------------------------------------------------------------------------------------
class IpcTensor(BaseModel):
    """One tensor shared with the driver: an IPC handle of its allocation, the offset into it, its layout."""

    model_config = ConfigDict(frozen=True)

    handle_hex: str = Field(pattern=r"^[0-9a-fA-F]{128}$", serialization_alias="handle")
    offset: int = Field(ge=0)
    dtype: int = Field(ge=0)  # a KBDtype code
    shape: list[int]
    strides: list[int]  # in elements

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


class RunRequest(BaseModel):
    cmd: Literal["run"] = "run"
    set_index: int = Field(ge=0, serialization_alias="set")


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


DriverRequest = SetupRequest | RunRequest | TimeRequest | ProfileRequest | ExitRequest


class DriverReply(BaseModel):
    """Every reply: `ok`, and on failure the error, whether the driver exits after it, and kb_forward's rc."""

    ok: bool
    error: str | None = None
    fatal: bool = False
    rc: int | None = None


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
        super().__init__(summary + (f"; stderr: {last_lines[-600:]}" if last_lines else ""))


class DriverTimeout(DriverError):
    """A request got no reply in time; the driver's process group has been killed."""

    def __init__(self, command: str, timeout_s: float, stderr_tail: str) -> None:
        self.command = command
        self.timeout_s = timeout_s
        super().__init__(f"no reply to '{command}' within {timeout_s:g} s; the driver was killed", stderr_tail)


class DriverCrashed(DriverError):
    """The driver died, or answered with an error (a CUDA error, kb_forward's nonzero rc, a bad request)."""

    def __init__(self, error: str, exit_status: int | None, stderr_tail: str, rc: int | None = None) -> None:
        self.error = error
        self.exit_status = exit_status
        self.rc = rc
        super().__init__(error + _describe_exit(exit_status), stderr_tail)


def _describe_exit(exit_status: int | None) -> str:
    if exit_status is None:
        return ""
    if exit_status < 0:
        return f" (driver killed by {signal.Signals(-exit_status).name})"
    return f" (driver exited with status {exit_status})"


# ---------------------------------------------------------------------------------------------------
# The session
# ---------------------------------------------------------------------------------------------------
class DriverSession:
    """One driver process for one candidate; use as a context manager."""

    def __init__(
        self,
        executable: Path,
        *,
        wrapper: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        exit_timeout_s: float | None = None,
    ) -> None:
        """`wrapper` prefixes the command (e.g. ncu's argv); `env` is added to the current environment.

        `exit_timeout_s` bounds the wait for a clean exit on close (default 10 s, 300 s under a wrapper).
        """
        self.argv = [*wrapper, str(executable)]
        default_exit_timeout_s = WRAPPED_EXIT_TIMEOUT_S if wrapper else EXIT_TIMEOUT_S
        self._exit_timeout_s = exit_timeout_s if exit_timeout_s is not None else default_exit_timeout_s
        self._env = {**os.environ, **(env or {})}
        self._cwd = cwd
        self._process: subprocess.Popen[bytes] | None = None
        self._stdout_buffer = b""
        self._tail = _OutputTail(STDERR_TAIL_BYTES)
        self._stderr_reader: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> None:
        self._process = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env,
            cwd=self._cwd,
            start_new_session=True,  # its own process group, killed as a whole on a hang
        )
        assert self._process.stderr is not None
        self._stderr_reader = threading.Thread(
            target=self._tail.drain, args=(self._process.stderr.fileno(),), name="driver-stderr", daemon=True
        )
        self._stderr_reader.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def exit_status(self) -> int | None:
        """The exit status once the process has ended (negative: killed by that signal)."""
        return self._process.poll() if self._process is not None else None

    def stderr_tail(self) -> str:
        return self._tail.text()

    def close(self) -> None:
        """Ask the driver to exit; kill its process group if it does not. Safe to call more than once."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            try:
                self._request(ExitRequest(), DriverReply, self._exit_timeout_s)
                process.wait(timeout=self._exit_timeout_s)
            except (DriverError, subprocess.TimeoutExpired):
                self._kill()
        self._finish()

    # -- requests -------------------------------------------------------------------------------------
    def setup(self, sets: list[TensorSet], flush_bytes: int, device: int = 0, timeout_s: float = 60.0) -> None:
        """Map every tensor set through IPC; `flush_bytes` sizes the L2 flush buffer (2x the L2 size)."""
        self._request(SetupRequest(device=device, flush_bytes=flush_bytes, sets=sets), DriverReply, timeout_s)

    def run(self, set_index: int, timeout_s: float) -> None:
        """One kb_forward call on a tensor set, synchronised and checked for CUDA errors."""
        self._request(RunRequest(set_index=set_index), DriverReply, timeout_s)

    def time(self, sets: list[int], warmup: int, iters: int, flush: bool, timeout_s: float,
             poison: bool = True) -> TimingReply:
        """`iters` timed calls after `warmup` untimed ones, rotating over `sets`, with an L2 flush (and, with
        `poison`, the outputs poisoned) before each."""
        request = TimeRequest(warmup=warmup, iters=iters, sets=sets, flush=flush, poison=poison)
        return self._request(request, TimingReply, timeout_s)

    def profile(self, set_index: int, warmup: int, timeout_s: float) -> None:
        """`warmup` calls, then one call between cudaProfilerStart/Stop (for `ncu --profile-from-start off`)."""
        self._request(ProfileRequest(set_index=set_index, warmup=warmup), DriverReply, timeout_s)

    def _request(self, request: DriverRequest, reply_type: type[ReplyT], timeout_s: float) -> ReplyT:
        process = self._running_process()
        assert process.stdin is not None
        try:
            process.stdin.write(request.model_dump_json(by_alias=True).encode() + b"\n")
            process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(request.cmd) from None
        raw = self._read_reply(request.cmd, timeout_s)
        reply = DriverReply.model_validate(raw)
        if not reply.ok:
            if reply.fatal:
                self._wait_for_exit(FATAL_EXIT_WAIT_S)
            raise DriverCrashed(
                reply.error or "the driver reported an error", self.exit_status, self.stderr_tail(), reply.rc
            )
        try:
            return reply_type.model_validate(raw)
        except ValidationError as error:
            raise DriverCrashed(
                f"malformed reply to '{request.cmd}': {error}", self.exit_status, self.stderr_tail()
            ) from None

    def _running_process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise DriverCrashed("the driver session was never started", None, "")
        if self._process.poll() is not None:
            raise DriverCrashed("the driver is no longer running", self._process.returncode, self.stderr_tail())
        return self._process

    def _read_reply(self, command: str, timeout_s: float) -> dict[str, object]:
        """The next JSON object line on stdout; other lines (a wrapper's own output) go to the tail."""
        process = self._running_process()
        assert process.stdout is not None
        stdout_fd = process.stdout.fileno()
        poller = select.poll()  # not select(): a long-lived harness may hold file descriptors above 1024
        poller.register(stdout_fd, select.POLLIN)
        deadline = time.monotonic() + timeout_s
        while True:
            line = self._next_stdout_line()
            if line is not None:
                reply = _parse_reply_line(line)
                if reply is not None:
                    return reply
                self._tail.append(line + b"\n")
                continue
            remaining_ms = max(0.0, deadline - time.monotonic()) * 1000
            if not poller.poll(remaining_ms):
                self._kill()
                raise DriverTimeout(command, timeout_s, self.stderr_tail())
            chunk = os.read(stdout_fd, 65536)
            if not chunk:
                raise self._died(command)
            self._stdout_buffer += chunk

    def _next_stdout_line(self) -> bytes | None:
        newline = self._stdout_buffer.find(b"\n")
        if newline < 0:
            return None
        line, self._stdout_buffer = self._stdout_buffer[:newline], self._stdout_buffer[newline + 1 :]
        return line

    def _died(self, command: str) -> DriverCrashed:
        self._wait_for_exit(FATAL_EXIT_WAIT_S)
        return DriverCrashed(f"the driver exited without replying to '{command}'", self.exit_status, self.stderr_tail())

    def _wait_for_exit(self, timeout_s: float) -> None:
        """Give a driver that is going down time to exit, then kill whatever is left of its group."""
        assert self._process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=timeout_s)
        self._kill()

    def _kill(self) -> None:
        """Kill the driver's whole process group (children and a wrapper included) and reap it."""
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


def _parse_reply_line(line: bytes) -> dict[str, object] | None:
    """The line as a reply object, or None when it is not one (e.g. `==PROF==` lines from ncu)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "ok" in value else None


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
            return self._data.decode(errors="replace")
