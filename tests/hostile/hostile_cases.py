"""Manifest of the hostile candidates (tests/hostile/candidates/*.cu) and what must happen to each.

Plain data, no tests. Each file says in its first comment what it tries. A candidate that builds is
compiled with the shared parts in tests/hostile/parts/ put after its includes (`candidate_source`): a raw
system call (`sys`, `say`) where it uses one, and a correct elementwise_swish_scale (`launch_swish`, and
kb_forward when the file has none), so its verdict is decided by what the sandbox and the harness do about
its attack alone. A refused candidate is compiled as it is.
- `refused_by`: the rule that stops it before it runs (a static rule, or "link_error"); None: it builds.
- `at_load`: what happens when its built driver starts in the sandbox (no GPU needed: load-time code runs
  before CUDA): "blocked" (the launcher's filter ends the process, naming `blocked_call`), "forged"
  (replies arrive before their request) or "starts" (the attack, if any, fails quietly).
- `verdicts`: the verdicts a GPU evaluation may give; `reason`, words its summary must contain (caught for the
  reason the candidate tests, not another).
- `sanitized`: for an attack on compute-sanitizer's report, the checker and the verdicts an evaluation under
  it (`--sanitize`) may give.
- `profiled`: an attack on ncu's report, made while it is profiled (the evaluation's verdict is `verdicts`).
The raw system calls in these files are x86-64 instructions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

HOSTILE_DIR = Path(__file__).resolve().parent / "candidates"
PARTS_DIR = Path(__file__).resolve().parent / "parts"
SWISH = Path(__file__).resolve().parents[2] / "examples" / "problems" / "elementwise_swish_scale.py"


@dataclass(frozen=True)
class HostileCase:
    name: str
    refused_by: str | None
    at_load: Literal["blocked", "forged", "starts"] | None = None
    blocked_call: str | None = None
    verdicts: frozenset[str] = frozenset()
    # For a forgery whose rewrite may not reach the reply (it depends on how the driver formats replies):
    # `ok` is acceptable only with a time at least this, so the honest time, not the forged one, was taken.
    honest_min_ms: float | None = None
    sanitized: tuple[str, frozenset[str]] | None = None
    profiled: bool = False
    # Words the verdict's summary must contain: the candidate was caught for the reason it was written to test.
    reason: str | None = None

    @property
    def source(self) -> Path:
        return HOSTILE_DIR / f"{self.name}.cu"

    @property
    def what_it_tries(self) -> str:
        return self.source.read_text().splitlines()[0].removeprefix("// HOSTILE: ")

    def candidate_source(self) -> str:
        """The candidate as it is compiled: the file, with the shared parts it needs after its includes."""
        text = self.source.read_text()
        if self.refused_by is not None:
            return text
        parts = (["raw_syscall.h"] if re.search(r"\b(?:sys|say)\(", text) else [])
        parts += (["checker_logs.h"] if "for_each_checker_file(" in text else []) + ["swish.h"]
        lines = text.splitlines(keepends=True)
        after_includes = max(i for i, line in enumerate(lines) if line.startswith("#include")) + 1
        shared = "".join((PARTS_DIR / part).read_text() + "\n" for part in parts)
        source = "".join(lines[:after_includes]) + "\n" + shared + "".join(lines[after_includes:])
        if "kb_forward" not in text:
            source += "\n" + (PARTS_DIR / "swish_forward.h").read_text()
        return source


def _refused(name: str, rule: str) -> HostileCase:
    verdict = "compile_error" if rule == "link_error" else "static_violation"
    return HostileCase(name, refused_by=rule, verdicts=frozenset({verdict}))


def _blocked(name: str, call: str) -> HostileCase:
    return HostileCase(name, None, "blocked", call, frozenset({"sandbox_violation"}))


def _built(name: str, at_load: Literal["forged", "starts"], verdict: str) -> HostileCase:
    return HostileCase(name, None, at_load, None, frozenset({verdict}))


def _against_checker(name: str, tool: str, sanitized_verdict: str) -> HostileCase:
    """An attack on the report of compute-sanitizer's `tool`: without it the candidate is a correct kernel."""
    return HostileCase(name, None, "starts", None, frozenset({"ok"}),
                       sanitized=(tool, frozenset({sanitized_verdict})))


HOSTILE_CASES: tuple[HostileCase, ...] = (
    # Compile time: host files through the preprocessor and the assembler, header-path tricks.
    _refused("incbin_etc_passwd", "assembler_file"),
    _refused("incbin_macro", "outside_file"),
    _refused("include_etc_hostname", "outside_file"),
    _refused("include_macro_path", "include_path"),
    _refused("include_dev_stdin", "outside_file"),
    _refused("cute_dot_path", "library:cutlass"),
    _refused("cublas_macro_include", "include_path"),
    # Calls the source and symbol rules now see: raw syscall instruction, libc aliases, weak references,
    # host callbacks, early constructors, a .preinit_array. (Persisting L2 windows are cleared by the driver
    # before every timed call: tests/fixtures/candidates/persisting_l2_window.cu.)
    _refused("raw_syscall_asm", "system_call"),
    _refused("libc_alias_system", "process"),
    _refused("weak_system", "process"),
    _refused("weak_environ", "environment"),
    _refused("host_callback", "host_callbacks"),
    _refused("constructor_priority", "load_time_code"),
    _refused("hidden_preinit", "link_error"),
    # Past every rule: the sandbox contains them.
    _blocked("exec_raw_syscall", "execve"),
    _blocked("fork_raw_syscall", "fork"),
    _blocked("memfd_execveat", "execveat"),
    _blocked("exec_phdr_resolver", "execve"),
    _built("host_node_exec", "starts", "sandbox_violation"),
    _built("read_host_files", "starts", "ok"),
    _built("write_host_files", "starts", "ok"),
    _built("env_secrets", "starts", "ok"),
    _built("network_connect", "starts", "ok"),
    _built("signal_everyone", "starts", "ok"),
    # Forged results.
    _built("forge_fileno", "forged", "forged_result"),
    _built("forge_reply_in_forward", "starts", "forged_result"),
    HostileCase("forge_fputs_rewrite", None, "starts", None, frozenset({"forged_result", "ok"}), honest_min_ms=0.5),
    # The trusted process made to fail: replies it cannot parse, memory it cannot get.
    _built("reply_deeply_nested", "starts", "forged_result"),
    _built("reply_overlong_line", "starts", "forged_result"),
    _built("hoard_gpu_memory_wrong", "starts", "incorrect"),
    # Checker output redirected: compute-sanitizer's report replaced, flooded or forged (through /proc).
    _against_checker("checker_log_symlink", "memcheck", "ok"),
    _against_checker("checker_log_fifo", "memcheck", "ok"),
    _against_checker("checker_log_flood", "memcheck", "sanitizer_error"),
    _against_checker("checker_log_forged_clean", "memcheck", "sanitizer_error"),
    HostileCase("ncu_report_symlink", None, "starts", None, frozenset({"ok"}), profiled=True),
    # Timing and checks: the harness's own clock and checks it cannot predict.
    HostileCase("forge_median_event_rewrite", None, "starts", None, frozenset({"forged_result"}),
                reason="the harness's own clock"),
    HostileCase("skip_unwatched_calls", None, "starts", None, frozenset({"incorrect"}),
                reason="failed check 'timed_outputs'"),
    HostileCase("cache_sampled_inputs", None, "starts", None, frozenset({"incorrect"}),
                reason="failed check 'timed_outputs'"),
    HostileCase("nan_zeroed_off_fixed_places", None, "starts", None, frozenset({"incorrect"}),
                reason="failed check 'special_values'"),
)

BUILT_CASES = tuple(case for case in HOSTILE_CASES if case.refused_by is None)
CHECKER_CASES = tuple(case for case in HOSTILE_CASES if case.sanitized is not None)
PROFILED_CASES = tuple(case for case in HOSTILE_CASES if case.profiled)
