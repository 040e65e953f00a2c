"""Manifest of the hostile candidates (tests/hostile/candidates/*.cu) and what must happen to each.

Plain data, no tests. Each file says in its first comment what it tries. A candidate is compiled with the
shared parts in tests/hostile/parts/ put after its includes (`candidate_source`): a raw system call (`sys`,
`say`) where it uses one, forged protocol replies (`print_forged_replies`) where it prints them, and a correct
elementwise_swish_scale (`launch_swish`, and kb_forward when the file has none), so its verdict is decided
by what the rules, the sandbox and the harness do about its attack alone; a refused candidate that uses none
of them is compiled as it is.
- `refused_by`: every rule that stops it when it is built (empty: it builds).
- `at_load`: what happens when it is built with the build's rules switched off (they are the early warning,
  not the boundary) and its driver starts in the sandbox (no GPU needed: load-time code runs before CUDA):
  "blocked" (the filter ends the process; `blocked_call` is what the harness names), "forged" (replies
  arrive before their request) or "starts" (the attack, if any, fails quietly); None: not tried.
- `verdicts`: the verdicts a GPU evaluation may give, with the rules (`static_violation` when refused).
- `unchecked_verdicts`: the verdicts a GPU evaluation may give with the rules switched off (what the
  sandbox and the harness alone make of it); empty: not tried.
- `sanitized`: for an attack on compute-sanitizer's report, the checker and the verdicts an evaluation under
  it (`--sanitize`) may give (built without the rules where they refuse it).
- `profiled`: an attack on ncu's report, made while it is profiled.
- `reason`: words the verdict's summary must contain (caught for the reason the candidate tests, not another).
- `honest_min_ms`: for a forgery that must not reach the reply, the least time an `ok` may carry (with the
  rules, and without them where `unchecked_verdicts` allows `ok`).
- `problem`: the problem it is evaluated on (elementwise_swish_scale unless its attack needs another: a cache of
  derived weights needs weights, a memo of a GEMM's rows a GEMM); a candidate for another problem gets only the
  parts written for that problem (`gemm_rows` for gemm_bias_relu), never the swish ones.
The raw system calls in these files are x86-64 instructions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

HOSTILE_DIR = Path(__file__).resolve().parent / "candidates"
PARTS_DIR = Path(__file__).resolve().parent / "parts"
PROBLEMS_DIR = Path(__file__).resolve().parents[2] / "examples" / "problems"
SWISH = PROBLEMS_DIR / "elementwise_swish_scale.py"
GEMM = PROBLEMS_DIR / "gemm_bias_relu.py"


@dataclass(frozen=True)
class HostileCase:
    name: str
    refused_by: frozenset[str]
    at_load: Literal["blocked", "forged", "starts"] | None = None
    blocked_call: str | None = None
    verdicts: frozenset[str] = frozenset()
    unchecked_verdicts: frozenset[str] = frozenset()
    # For a forgery that must not reach the reply: `ok` is acceptable only with a time at least this, so the
    # honest time, not the forged one, was taken.
    honest_min_ms: float | None = None
    # Built without the rules, what the driver's replies to `probe` must be, exactly (a hijack of the driver's
    # own calls would change them).
    probe: tuple[str, ...] = ()
    sanitized: tuple[str, frozenset[str]] | None = None
    profiled: bool = False
    # Words the verdict's summary must contain: the candidate was caught for the reason it was written to test.
    reason: str | None = None
    problem: Path = SWISH

    @property
    def source(self) -> Path:
        return HOSTILE_DIR / f"{self.name}.cu"

    @property
    def what_it_tries(self) -> str:
        return self.source.read_text().splitlines()[0].removeprefix("// HOSTILE: ")

    def candidate_source(self) -> str:
        """The candidate as it is compiled: the file, with the shared parts it needs after its includes (none
        for a refused candidate that is never run and uses none: an attack on the compile)."""
        text = self.source.read_text()
        if self.problem != SWISH:
            return with_parts(text, swish=False)
        runs = self.at_load is not None or bool(self.unchecked_verdicts) or not self.refused_by
        if not runs and "launch_swish" not in text:
            return text
        return with_parts(text)


def with_parts(text: str, swish: bool = True) -> str:
    """A candidate's file with the shared parts it uses (tests/hostile/parts) after its includes: with `swish`,
    the correct swish kernel always, and a `kb_forward` launching it where the file has none."""
    parts = (["gemm_rows.h"] if "gemm_rows(" in text else [])
    parts += (["raw_syscall.h"] if re.search(r"\b(?:sys|say)\(", text) else [])
    parts += (["checker_logs.h"] if "for_each_checker_file(" in text else [])
    parts += (["decimal_comma.h"] if "switch_to_decimal_comma(" in text else [])
    parts += (["forged_replies.h"] if "print_forged_replies" in text else []) + (["swish.h"] if swish else [])
    lines = text.splitlines(keepends=True)
    after_includes = max(i for i, line in enumerate(lines) if line.startswith("#include")) + 1
    shared = "".join((PARTS_DIR / part).read_text() + "\n" for part in parts)
    source = "".join(lines[:after_includes]) + "\n" + shared + "".join(lines[after_includes:])
    if swish and "kb_forward" not in text:
        source += "\n" + (PARTS_DIR / "swish_forward.h").read_text()
    return source


STATIC = frozenset({"static_violation"})


def _refused(name: str, *rules: str) -> HostileCase:
    """Stopped by the rules before it runs, and not tried without them (its attack is on the compile)."""
    return HostileCase(name, frozenset(rules), verdicts=STATIC)


def _contained(name: str, rules: tuple[str, ...], at_load: Literal["blocked", "forged", "starts"],
               blocked_call: str | None = None, *unchecked: str) -> HostileCase:
    """Stopped by the rules; without them, contained by the sandbox (and, on a GPU, given one of `unchecked`)."""
    return HostileCase(name, frozenset(rules), at_load, blocked_call, STATIC, frozenset(unchecked))


def _against_checker(name: str, tool: str, sanitized_verdict: str) -> HostileCase:
    """An attack on the report of compute-sanitizer's `tool` through raw system calls, which the rules refuse:
    built without them, a correct kernel whose checker's report it attacks."""
    return HostileCase(name, frozenset({"host_assembly"}), "starts", None, STATIC, frozenset({"ok"}),
                       sanitized=(tool, frozenset({sanitized_verdict})))


RAW_AT_LOAD = ("host_assembly", "load_time_code")  # a raw system call from a constructor
EXIT_PROBE = ('{"cmd":"dance","seq":1}', '{"cmd":"exit","seq":2}')

HOSTILE_CASES: tuple[HostileCase, ...] = (
    # Compile time: host files through the preprocessor and the assembler, header-path tricks.
    _refused("incbin_etc_passwd", "assembler_file"),
    _refused("incbin_macro", "outside_file"),
    _refused("include_etc_hostname", "outside_file"),
    _refused("include_macro_path", "include_path"),
    _refused("include_dev_stdin", "outside_file"),
    _refused("cute_dot_path", "library:cutlass"),
    _refused("cublas_macro_include", "include_path"),
    # What the source rules spell out, and the allowlist of imports and the object's init arrays catch
    # however spelled. (Persisting L2 windows are cleared by the driver before every timed call:
    # tests/fixtures/candidates/persisting_l2_window.cu.)
    _refused("raw_syscall_asm", "system_call"),
    _refused("libc_alias_system", "process"),
    _refused("weak_system", "process"),
    _refused("weak_environ", "environment"),
    _refused("host_callback", "host_callbacks"),
    _refused("constructor_priority", "load_time_code"),
    _refused("hidden_preinit", "load_time_code"),
    _refused("byte_syscall", "host_assembly"),
    _refused("incbin_stringised", "host_assembly"),
    _refused("unlisted_glibc", "unlisted_import"),
    _refused("huge_object_array", "object_size"),
    _contained("concat_init_array", ("load_time_code",), "starts"),
    # Load-time code through the two load-time functions the object check lets through (nvcc's registration,
    # <iostream>'s initialiser), seen in the host compiler's assembly; sections the linker or the loader obeys
    # (dynamic relocations, link-time IR) and machine code as data, refused by the object's list of sections;
    # asm a candidate's macro puts on a header's line; definitions that take the calls of the trusted code
    # linked into the candidate's library.
    _contained("iostream_initialiser_call", ("load_time_code",), "forged", None, "forged_result"),
    _contained("named_initialiser_same_section", ("load_time_code", "reserved_name"), "forged", None,
               "forged_result"),
    _contained("device_variable_operator_address", ("load_time_code",), "forged", None, "forged_result"),
    _contained("device_variable_pointer_call", ("load_time_code",), "forged", None, "forged_result"),
    _contained("registration_atexit_label", ("load_time_code", "reserved_name"), "forged", None, "forged_result"),
    _refused("relocation_section_irelative", "object_section"),
    _refused("lto_section_ir", "object_section"),
    _contained("machine_code_in_text", ("object_section",), "starts"),
    _contained("system_header_macro_asm", ("host_assembly",), "starts"),
    _contained("header_macro_inline_asm", ("host_assembly",), "starts"),
    _contained("gmon_start_definition", ("reserved_name",), "forged", None, "forged_result"),
    _contained("workspace_memset_shadow", ("reserved_name",), "starts"),
    _contained("cxa_finalize_definition", ("reserved_name",), "starts"),
    _contained("stack_chk_fail_definition", ("load_time_code", "reserved_name"), "starts"),
    _contained("local_label_initialiser", ("load_time_code",), "forged", None, "forged_result"),
    _contained("local_label_device_variable", ("load_time_code",), "forged", None, "forged_result"),
    _contained("cxa_atexit_definition", ("reserved_name",), "forged", None, "forged_result"),
    # Lines renamed as a header's or nvcc's own, where the host-code check allows asm, however the directive is
    # spelled (the preprocessor's own output is read for them too: tests/cpu/test_host_code.py).
    _refused("line_directive_form_feed", "line_directive"),
    _refused("line_directive_after_carriage_return", "line_directive"),
    _refused("empty_macro_line_marker", "line_directive", "host_assembly"),
    _refused("import_name_label", "host_assembly", "reserved_name"),
    # Past the rules when they are switched off: the sandbox contains them.
    _contained("exec_raw_syscall", RAW_AT_LOAD, "blocked", "execve", "sandbox_violation"),
    _contained("fork_raw_syscall", RAW_AT_LOAD, "blocked", "fork", "sandbox_violation"),
    _contained("memfd_execveat", RAW_AT_LOAD, "blocked", "execveat", "sandbox_violation"),
    _contained("exec_phdr_resolver", RAW_AT_LOAD, "blocked", "execve", "sandbox_violation"),
    _contained("blocked_after_partial_line", RAW_AT_LOAD, "blocked", "execve", "sandbox_violation"),
    _contained("stderr_closed_then_exec", RAW_AT_LOAD, "blocked", "execve", "sandbox_violation"),
    _contained("sigsys_handler_takeover", RAW_AT_LOAD, "blocked", "rt_sigaction", "sandbox_violation"),
    _contained("sigsys_blocked_then_exec", RAW_AT_LOAD, "blocked", "a", "sandbox_violation"),
    _contained("host_node_exec", ("host_assembly", "unlisted_import"), "starts", None, "sandbox_violation"),
    _contained("read_host_files", RAW_AT_LOAD, "starts", None, "ok"),
    _contained("write_host_files", RAW_AT_LOAD, "starts", None, "ok"),
    _contained("env_secrets", RAW_AT_LOAD, "starts", None, "ok"),
    _contained("network_connect", RAW_AT_LOAD, "starts", None, "ok"),
    _contained("signal_everyone", RAW_AT_LOAD, "starts", None, "ok"),
    # Resources past the driver's limits: the GPU sandbox's /dev tmpfs filled (no process's memory).
    _contained("fill_dev_tmpfs", RAW_AT_LOAD, "starts", None, "ok"),
    # Shared memory no process limit counts (memfd, which CUDA's driver needs, and System V segments), and threads
    # past the task limit, which the kernel does not apply to root: bounded by the sandbox's cgroups where they
    # can be made (tools/host_bound.py). The memory taken is under the bound, so the driver starts; the threads
    # stop at the task bound, and CUDA may then find none left for its own (a crash, the candidate's doing).
    _contained("fill_host_memory_memfd", RAW_AT_LOAD, "starts", None, "ok"),
    _contained("thread_flood", RAW_AT_LOAD, "starts", None, "ok", "crash"),
    # Forged results.
    _contained("forge_fileno", ("load_time_code",), "forged", None, "forged_result"),
    _contained("forge_reply_in_forward", ("unlisted_import",), "starts", None, "forged_result"),
    # Past every rule: a separate link unit and the sandbox hold.
    HostileCase("forge_fputs_rewrite", frozenset(), "starts", verdicts=frozenset({"ok"}), honest_min_ms=0.5),
    HostileCase("libc_hijack_label", frozenset(), "starts", verdicts=frozenset({"ok"}), honest_min_ms=0.5,
                probe=EXIT_PROBE),
    HostileCase("vector_member_hijack", frozenset(), "starts", verdicts=frozenset({"ok"}), honest_min_ms=0.5),
    HostileCase("libc_symtab_walk", frozenset(), "starts", verdicts=frozenset({"sandbox_violation"}),
                blocked_call="execve"),
    # The trusted process made to fail: replies it cannot parse (written with raw system calls), memory it
    # cannot get.
    _contained("reply_deeply_nested", ("host_assembly",), "starts", None, "forged_result"),
    _contained("reply_overlong_line", ("host_assembly",), "starts", None, "forged_result"),
    HostileCase("hoard_gpu_memory_wrong", frozenset(), "starts", verdicts=frozenset({"incorrect"})),
    # Text the trusted process reads that is not UTF-8: the compiler's output, and a genuine reply whose error
    # text (an exception's) holds the bytes of a lone surrogate, which the JSON reader turned into one.
    HostileCase("compiler_message_invalid_utf8", frozenset(), "starts", verdicts=frozenset({"ok"})),
    HostileCase("exception_text_lone_surrogate", frozenset(), "starts", verdicts=frozenset({"crash"}),
                reason="kb_forward threw"),
    HostileCase("exception_text_not_utf8", frozenset(), "starts", verdicts=frozenset({"crash"}),
                reason="kb_forward threw"),
    HostileCase("terminal_escape_in_crash", frozenset(), "starts", verdicts=frozenset({"crash"}),
                reason="kb_forward threw \\x1b]52;c;"),
    # The driver's own formatting and state bent from the candidate's code: the process's locale switched to a
    # decimal comma (the driver's numbers never go through one), the workspace-poisoning switch found in the
    # wrappers' code and cleared (there is none: every allocation is poisoned).
    _refused("locale_global_numpunct", "unlisted_import"),
    HostileCase("locale_decimal_comma", frozenset({"file_io", "environment"}), "starts", verdicts=STATIC,
                unchecked_verdicts=frozenset({"ok"}), honest_min_ms=0.5),
    HostileCase("workspace_flag_cleared", frozenset(), "starts", verdicts=frozenset({"incorrect"})),
    # Checker output redirected: compute-sanitizer's report replaced, flooded or forged (through /proc).
    _against_checker("checker_log_symlink", "memcheck", "ok"),
    _against_checker("checker_log_fifo", "memcheck", "ok"),
    _against_checker("checker_log_flood", "memcheck", "sanitizer_error"),
    _against_checker("checker_log_forged_clean", "memcheck", "sanitizer_error"),
    HostileCase("ncu_report_symlink", frozenset({"host_assembly"}), "starts", None, STATIC, frozenset({"ok"}),
                profiled=True),
    # Timing and checks: the harness's own clock and checks it cannot predict.
    HostileCase("forge_median_event_rewrite", frozenset(), "starts", verdicts=frozenset({"forged_result"}),
                reason="the harness's own clock"),
    HostileCase("skip_unwatched_calls", frozenset(), "starts", verdicts=frozenset({"incorrect"}),
                reason="failed check 'timed_outputs'"),
    HostileCase("cache_sampled_inputs", frozenset(), "starts", verdicts=frozenset({"incorrect"}),
                reason="failed check 'timed_outputs'"),
    HostileCase("nan_zeroed_off_fixed_places", frozenset(), "starts", verdicts=frozenset({"incorrect"}),
                reason="failed check 'special_values'"),
    # Caches the trusted batches' changes at a few places did not reach: an exact memo that recomputes only
    # the rows whose inputs changed (the batches now refill the sets from fresh seeds), and a copy of the
    # weights kept while 64 sampled values stay the same (the params are now changed at secret places too).
    HostileCase("memo_rows_changed_since_last_call", frozenset(), "starts",
                verdicts=frozenset({"forged_result"}), reason="the harness's own clock", problem=GEMM),
    HostileCase("prepacked_weights_sampled_key", frozenset(), "starts", verdicts=frozenset({"incorrect"}),
                reason="failed check 'timed_outputs'", problem=GEMM),
    # Correct in the harness, another kernel once exported (built by torch in the user's own process): the
    # export's nvcc flags undo torch's macros and repeat the harness's, so the builds look alike to the source.
    HostileCase("export_build_divergence", frozenset(), "starts", verdicts=frozenset({"ok"})),
)

BUILT_CASES = tuple(case for case in HOSTILE_CASES if case.at_load is not None)
CHECKER_CASES = tuple(case for case in HOSTILE_CASES if case.sanitized is not None)
PROFILED_CASES = tuple(case for case in HOSTILE_CASES if case.profiled)
