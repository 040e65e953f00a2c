"""Nsight Compute (`ncu`): find it, build the command that profiles a program under it, export a finished
report's "Details" page as CSV, parse that CSV into a typed per-kernel report, and render the report as
a compact text for the LLM agents.

Running the profiled program is the driver runner's job (it takes the wrapper argv built here); this
module only ever runs `ncu --import` on a report that already exists.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, computed_field

from kernelblaster.tools.errors import UserFacingError

NCU_ENV_VAR = "KERNELBLASTER_NCU"
# Where the CUDA toolkit lives when CUDA_HOME is unset; ncu is often installed there but not on PATH.
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")

# The sections a GPU engineer reads first; together they feed every field of the state signature.
DEFAULT_SECTIONS: tuple[str, ...] = (
    "SpeedOfLight",
    "MemoryWorkloadAnalysis",
    "ComputeWorkloadAnalysis",
    "Occupancy",
    "LaunchStats",
    "SchedulerStats",
    "WarpStateStats",
    "InstructionStats",
)

REPORT_SUFFIX = ".ncu-rep"
OUTPUT_TAIL_CHARS = 2000

# Section names as the details page prints them for metric rows (rule rows use the short identifiers).
SECTION_SPEED_OF_LIGHT = "GPU Speed Of Light Throughput"
SECTION_MEMORY = "Memory Workload Analysis"
SECTION_COMPUTE = "Compute Workload Analysis"
SECTION_OCCUPANCY = "Occupancy"
SECTION_LAUNCH = "Launch Statistics"
SECTION_SCHEDULER = "Scheduler Statistics"
SECTION_WARP_STATE = "Warp State Statistics"

# The two Compute Workload Analysis tables measured against active cycles: the first covers FMA, ALU and
# the tensor pipes, only the second covers LSU, so a pipe's utilisation is its maximum over both.
PIPE_TABLES_ACTIVE = (
    "Pipe Utilization (% of active cycles)",
    "Pipe Utilization (% of peak instructions executed over active cycles)",
)
STALL_PREFIX = "Stall "
RULE_TYPE_OPTIMIZATION = "OPT"

_TIME_UNIT_NS = {
    "ns": 1.0, "nsecond": 1.0,
    "us": 1e3, "usecond": 1e3,
    "ms": 1e6, "msecond": 1e6,
    "s": 1e9, "second": 1e9,
}
_NUMBER = re.compile(r"[+-]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?")
_DIM3 = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")

REQUIRED_COLUMNS = ("ID", "Kernel Name", "Block Size", "Grid Size", "Section Name", "Metric Name",
                    "Metric Unit", "Metric Value")


# ---------------------------------------------------------------------------------------------------
# Locating and running ncu
# ---------------------------------------------------------------------------------------------------

class ToolUnavailable(BaseModel):
    """A CUDA tool (ncu, compute-sanitizer) is not on this machine; its step is reported as unavailable and
    the evaluation goes on."""

    reason: str


class NcuUnavailableError(UserFacingError):
    """Raised by the functions that must run ncu when it cannot be found."""

    def __init__(self, unavailable: ToolUnavailable) -> None:
        super().__init__(unavailable.reason)
        self.unavailable = unavailable


class NcuFailedError(UserFacingError):
    """ncu ran and failed; the message carries its error lines and the tail of its output."""


def find_cuda_tool(executable: str, env_var: str) -> Path | ToolUnavailable:
    """Find a CUDA toolkit program: the path in `env_var`, else PATH, else $CUDA_HOME/bin, /usr/local/cuda/bin.

    An `env_var` naming a missing file is an error (the user asked for that file), not "unavailable".
    """
    configured = os.environ.get(env_var)
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise UserFacingError(f"{env_var}={configured} is not an executable file")
        return path
    on_path = shutil.which(executable)
    if on_path:
        return Path(on_path)
    cuda_homes = [Path(os.environ["CUDA_HOME"])] if os.environ.get("CUDA_HOME") else []
    toolkit_dirs = [home / "bin" for home in [*cuda_homes, DEFAULT_CUDA_HOME]]
    for directory in toolkit_dirs:
        candidate = directory / executable
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    searched = ", ".join(str(d) for d in toolkit_dirs)
    return ToolUnavailable(reason=f"{executable} not found (set {env_var}, or put it on PATH; also looked in "
                                 f"{searched})")


def locate_ncu() -> Path | ToolUnavailable:
    """The ncu executable, or why there is none."""
    return find_cuda_tool("ncu", NCU_ENV_VAR)


def ncu_available() -> bool:
    return isinstance(locate_ncu(), Path)


def _require_ncu() -> Path:
    located = locate_ncu()
    if isinstance(located, ToolUnavailable):
        raise NcuUnavailableError(located)
    return located


def report_file(report_path: Path) -> Path:
    """The file ncu actually writes for `report_path` (it appends `.ncu-rep` when that suffix is missing)."""
    return report_path if report_path.name.endswith(REPORT_SUFFIX) else report_path.with_name(
        report_path.name + REPORT_SUFFIX)


def profile_prefix(report_path: Path, *, sections: Sequence[str] = DEFAULT_SECTIONS) -> list[str]:
    """The ncu argv to put in front of a program so that it is profiled into `report_path`.

    The program brackets the work to profile with cudaProfilerStart/Stop (`--profile-from-start off`);
    clocks are left unlocked so the profile sees the clocks the timing sees.
    """
    argv = [str(_require_ncu()), "--target-processes", "all", "--profile-from-start", "off",
            "--clock-control", "none"]
    for section in sections:
        argv += ["--section", section]
    return [*argv, "--export", str(report_file(report_path)), "-f"]


def profile_command(argv: Sequence[str], report_path: Path, *,
                    sections: Sequence[str] = DEFAULT_SECTIONS) -> list[str]:
    """The full command that runs `argv` under ncu, writing the report to `report_path`."""
    return [*profile_prefix(report_path, sections=sections), *argv]


def check_ncu_run(returncode: int, output: str) -> None:
    """Raise NcuFailedError if a profiling run under ncu failed or profiled nothing."""
    _raise_on_ncu_errors(returncode, output)
    if "No kernels were profiled" in output:
        raise NcuFailedError(_failure_message("ncu profiled no kernels (was cudaProfilerStart reached?)",
                                              [], output))


def _raise_on_ncu_errors(returncode: int, output: str) -> None:
    error_lines = [line for line in output.splitlines() if line.startswith("==ERROR==")]
    if returncode != 0 or error_lines:
        raise NcuFailedError(_failure_message(f"ncu exited with status {returncode}", error_lines, output))


def _failure_message(headline: str, error_lines: list[str], output: str) -> str:
    errors = "; ".join(line.removeprefix("==ERROR==").strip() for line in error_lines)
    tail = output[-OUTPUT_TAIL_CHARS:].strip()
    return headline + (f": {errors}" if errors else "") + (f"\n--- output tail ---\n{tail}" if tail else "")


def export_details(report_path: Path, *, timeout_s: float = 120.0) -> str:
    """The report's details page (every metric and rule finding of every kernel) as CSV text."""
    report = report_file(report_path)
    if not report.is_file():
        raise UserFacingError(f"ncu report {report} does not exist")
    argv = [str(_require_ncu()), "--import", str(report), "--csv", "--page", "details", "--print-units", "base",
            "--print-details", "all", "--print-rule-details"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise NcuFailedError(f"ncu --import {report} took longer than {timeout_s:g} s") from exc
    _raise_on_ncu_errors(done.returncode, done.stderr + "\n" + done.stdout)
    return done.stdout


# ---------------------------------------------------------------------------------------------------
# The typed report
# ---------------------------------------------------------------------------------------------------

class Metric(BaseModel):
    """One metric row of the details page; `value` is None when the text is not a single number."""

    model_config = ConfigDict(frozen=True)

    section: str  # ncu section the row belongs to, e.g. "GPU Speed Of Light Throughput"
    label: str  # the row's sub-heading within the section, "" when it has none
    name: str  # metric name as the details page prints it, e.g. "Memory Throughput"
    unit: str  # its unit as printed with --print-units base (byte, cycle, %, ...)
    value: float | None  # the number, in `unit`
    text: str  # the value exactly as printed


class RuleFinding(BaseModel):
    """One rule result: type OPT (an optimisation opportunity), WRN, INF ...; speedup in percent."""

    model_config = ConfigDict(frozen=True)

    section: str  # ncu section whose rule produced it
    rule: str  # the rule's name
    type: str  # OPT, WRN, INF or ERR
    description: str  # ncu's advice, as written
    estimated_speedup_type: str  # "local" (this kernel) or "global" (the whole workload), "" when none
    estimated_speedup: float | None  # ncu's estimate of the gain, percent


class StallReason(BaseModel):
    """A warp stall reason and its average cycles per issued instruction."""

    name: str
    cycles: float


class PipeUtilization(BaseModel):
    """A pipeline and its utilisation in percent of active cycles."""

    name: str
    percent: float


class KernelProfile(BaseModel):
    """Everything the details page says about one kernel launch."""

    id: int  # launch index in the profiled call, from 0
    name: str  # the kernel's (demangled) name
    block_size: tuple[int, int, int]  # threads per block, (x, y, z)
    grid_size: tuple[int, int, int]  # blocks, (x, y, z)
    device: str  # the GPU's name
    compute_capability: str  # e.g. "9.0"
    stream: str  # the stream it ran on, as ncu names it
    registers_per_thread: int | None
    shared_memory_bytes: int | None  # static plus dynamic shared memory per block, bytes
    metrics: dict[str, list[Metric]]  # every metric row, by section
    rules: list[RuleFinding]  # every rule result

    @property
    def short_name(self) -> str:
        """The function name without return type or parameter list ("scale" for "scale(const float *, ...)")."""
        name = self.name.removeprefix("void ")
        angle = paren = 0
        parameter_list_start = None
        for index, char in enumerate(name):
            if char == "(" and angle == 0 and paren == 0:
                parameter_list_start = index
            angle += {"<": 1, ">": -1}.get(char, 0)
            paren += {"(": 1, ")": -1}.get(char, 0)
        # The parameter list is the last top-level parenthesised group ("(anonymous namespace)" is not).
        return name[:parameter_list_start] if parameter_list_start else name

    def metric(self, section: str, name: str, label: str = "") -> Metric | None:
        return _find_metric(self.metrics, section, name, label)

    def value(self, section: str, name: str, label: str = "") -> float | None:
        found = self.metric(section, name, label)
        return found.value if found else None

    @property
    def duration_ns(self) -> float | None:
        found = self.metric(SECTION_SPEED_OF_LIGHT, "Duration")
        if found is None or found.value is None:
            return None
        if found.unit not in _TIME_UNIT_NS:
            raise UserFacingError(f"kernel {self.id} Duration has unit {found.unit!r}; export with "
                                  "--print-units base")
        return found.value * _TIME_UNIT_NS[found.unit]

    @property
    def elapsed_cycles(self) -> float | None:
        return self.value(SECTION_SPEED_OF_LIGHT, "Elapsed Cycles")

    @property
    def sm_throughput_pct(self) -> float | None:
        return self.value(SECTION_SPEED_OF_LIGHT, "Compute (SM) Throughput")

    @property
    def memory_throughput_pct(self) -> float | None:
        return self.value(SECTION_SPEED_OF_LIGHT, "Memory Throughput")

    @property
    def dram_throughput_pct(self) -> float | None:
        return self.value(SECTION_SPEED_OF_LIGHT, "DRAM Throughput")

    @property
    def l1_throughput_pct(self) -> float | None:
        return self.value(SECTION_SPEED_OF_LIGHT, "L1/TEX Cache Throughput")

    @property
    def l2_throughput_pct(self) -> float | None:
        return self.value(SECTION_SPEED_OF_LIGHT, "L2 Cache Throughput")

    @property
    def l1_hit_rate_pct(self) -> float | None:
        return self.value(SECTION_MEMORY, "L1/TEX Hit Rate")

    @property
    def l2_hit_rate_pct(self) -> float | None:
        return self.value(SECTION_MEMORY, "L2 Hit Rate")

    @property
    def local_spill_overhead_pct(self) -> float | None:
        return self.value(SECTION_MEMORY, "Local Memory Spilling Request Overhead")

    @property
    def achieved_occupancy_pct(self) -> float | None:
        return self.value(SECTION_OCCUPANCY, "Achieved Occupancy")

    @property
    def theoretical_occupancy_pct(self) -> float | None:
        return self.value(SECTION_OCCUPANCY, "Theoretical Occupancy")

    @property
    def eligible_cycles_pct(self) -> float | None:
        """Percent of cycles in which a scheduler had at least one eligible warp (so could issue)."""
        return self.value(SECTION_SCHEDULER, "One or More Eligible")

    @property
    def executed_ipc(self) -> float | None:
        return self.value(SECTION_COMPUTE, "Executed Ipc Active")

    @property
    def cycles_per_issued_instruction(self) -> float | None:
        return self.value(SECTION_WARP_STATE, "Warp Cycles Per Issued Instruction")

    def stall_reasons(self) -> list[StallReason]:
        """Every "Stall ..." warp state (first occurrence of each), largest first."""
        stalls: dict[str, float] = {}
        for metric in self.metrics.get(SECTION_WARP_STATE, []):
            if metric.name.startswith(STALL_PREFIX) and metric.value is not None:
                stalls.setdefault(metric.name.removeprefix(STALL_PREFIX), metric.value)
        return sorted((StallReason(name=n, cycles=c) for n, c in stalls.items()), key=lambda s: -s.cycles)

    def pipe_utilization(self) -> list[PipeUtilization]:
        """Each pipe's utilisation of active cycles (its maximum over the active-cycle tables), largest first."""
        pipes: dict[str, float] = {}
        for metric in self.metrics.get(SECTION_COMPUTE, []):
            if metric.label in PIPE_TABLES_ACTIVE and metric.value is not None:
                pipes[metric.name] = max(metric.value, pipes.get(metric.name, 0.0))
        return sorted((PipeUtilization(name=n, percent=p) for n, p in pipes.items()), key=lambda p: -p.percent)

    def optimization_findings(self) -> list[RuleFinding]:
        """The OPT rule findings, largest estimated speedup first (those without an estimate last)."""
        found = [rule for rule in self.rules if rule.type == RULE_TYPE_OPTIMIZATION]
        return sorted(found, key=lambda r: -(r.estimated_speedup if r.estimated_speedup is not None else -1.0))


def _find_metric(metrics: dict[str, list[Metric]], section: str, name: str, label: str = "") -> Metric | None:
    return next((m for m in metrics.get(section, []) if m.name == name and m.label == label), None)


def _find_value(metrics: dict[str, list[Metric]], section: str, name: str) -> float | None:
    found = _find_metric(metrics, section, name)
    return found.value if found else None


class NcuReport(BaseModel):
    """Every profiled kernel launch in launch order, with the totals the paper measures by (computed fields:
    kernel_count; total_elapsed_cycles, cycles; total_gpu_time_ns, ns)."""

    kernels: list[KernelProfile]  # in launch order

    @computed_field
    @property
    def kernel_count(self) -> int:
        return len(self.kernels)

    @computed_field
    @property
    def total_elapsed_cycles(self) -> float:
        return sum(k.elapsed_cycles or 0.0 for k in self.kernels)

    @computed_field
    @property
    def total_gpu_time_ns(self) -> float:
        return sum(k.duration_ns or 0.0 for k in self.kernels)


# ---------------------------------------------------------------------------------------------------
# Parsing the details CSV
# ---------------------------------------------------------------------------------------------------

def parse_number(text: str) -> float | None:
    """A details-page number ("3,197,574,586.82") as a float; None for words, "no data" and lists."""
    stripped = text.strip()
    if not _NUMBER.fullmatch(stripped):
        return None
    return float(stripped.replace(",", ""))


def parse_details_csv(text: str) -> NcuReport:
    """Parse `ncu --csv --page details --print-units base --print-details all --print-rule-details` output."""
    rows = _csv_rows(text)
    builders: dict[int, _KernelBuilder] = {}
    for line_number, row in rows:
        kernel_id = _parse_int(row["ID"], "ID", line_number)
        builder = builders.get(kernel_id)
        if builder is None:
            builder = builders[kernel_id] = _KernelBuilder.from_row(kernel_id, row, line_number)
        elif builder.name != row["Kernel Name"]:
            raise UserFacingError(f"ncu details CSV line {line_number}: ID {kernel_id} is named "
                                  f"{row['Kernel Name']!r} here but {builder.name!r} earlier")
        builder.add(row, line_number)
    if not builders:
        raise UserFacingError("ncu details CSV has a header but no kernel rows (no kernel was profiled)")
    return NcuReport(kernels=[builders[kernel_id].build() for kernel_id in sorted(builders)])


def _csv_rows(text: str) -> list[tuple[int, dict[str, str]]]:
    """The data rows with their line numbers, after skipping anything ncu printed before the header."""
    lines = text.splitlines()
    header_index = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if header_index is None:
        first = lines[0][:120] if lines else "(empty)"
        raise UserFacingError(f"ncu details CSV has no header row starting with \"ID\" (first line: {first})")
    reader = csv.DictReader(io.StringIO("\n".join(lines[header_index:])), restval="")
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise UserFacingError(f"ncu details CSV lacks column(s) {', '.join(missing)} (export with --page details "
                              "--print-details all --print-rule-details)")
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        for row in reader:
            if None in row:
                raise UserFacingError(f"ncu details CSV line {header_index + reader.line_num} has more fields "
                                      "than the header")
            rows.append((header_index + reader.line_num, row))
    except csv.Error as exc:
        raise UserFacingError(f"ncu details CSV is not valid CSV near line {header_index + reader.line_num}: "
                              f"{exc}") from exc
    return rows


def _parse_int(text: str, column: str, line_number: int) -> int:
    value = parse_number(text)
    if value is None or value != int(value):
        raise UserFacingError(f"ncu details CSV line {line_number}: {column} is {text!r}, not an integer")
    return int(value)


def _parse_dim3(text: str, column: str, line_number: int) -> tuple[int, int, int]:
    match = _DIM3.fullmatch(text.strip())
    if not match:
        raise UserFacingError(f"ncu details CSV line {line_number}: {column} is {text!r}, not \"(x, y, z)\"")
    x, y, z = (int(group) for group in match.groups())
    return x, y, z


class _KernelBuilder:
    """Collects one kernel's rows while the CSV is read."""

    def __init__(self, kernel_id: int, name: str, block: tuple[int, int, int], grid: tuple[int, int, int],
                 row: dict[str, str]) -> None:
        self.kernel_id = kernel_id
        self.name = name
        self.block = block
        self.grid = grid
        self.device = row.get("Device", "")
        self.compute_capability = row.get("CC", "")
        self.stream = row.get("Stream", "")
        self.metrics: dict[str, list[Metric]] = {}
        self.rules: list[RuleFinding] = []

    @classmethod
    def from_row(cls, kernel_id: int, row: dict[str, str], line_number: int) -> _KernelBuilder:
        return cls(kernel_id, row["Kernel Name"], _parse_dim3(row["Block Size"], "Block Size", line_number),
                   _parse_dim3(row["Grid Size"], "Grid Size", line_number), row)

    def add(self, row: dict[str, str], line_number: int) -> None:
        section = row["Section Name"]
        if row.get("Rule Name"):
            self.rules.append(_rule_from_row(section, row, line_number))
        elif row["Metric Name"]:
            text = row["Metric Value"]
            self.metrics.setdefault(section, []).append(Metric(
                section=section, label=row.get("Body Item Label", ""), name=row["Metric Name"],
                unit=row["Metric Unit"], value=parse_number(text), text=text))

    def build(self) -> KernelProfile:
        registers = _find_value(self.metrics, SECTION_LAUNCH, "Registers Per Thread")
        static = _find_value(self.metrics, SECTION_LAUNCH, "Static Shared Memory Per Block")
        dynamic = _find_value(self.metrics, SECTION_LAUNCH, "Dynamic Shared Memory Per Block")
        # The driver's reserved 1 KiB per block is left out: it is not something the kernel can change.
        shared = None if static is None and dynamic is None else int((static or 0) + (dynamic or 0))
        return KernelProfile(
            id=self.kernel_id, name=self.name, block_size=self.block, grid_size=self.grid, device=self.device,
            compute_capability=self.compute_capability, stream=self.stream,
            registers_per_thread=None if registers is None else int(registers), shared_memory_bytes=shared,
            metrics=self.metrics, rules=self.rules)


def _rule_from_row(section: str, row: dict[str, str], line_number: int) -> RuleFinding:
    speedup_text = row.get("Estimated Speedup", "")
    speedup = parse_number(speedup_text)
    if speedup_text.strip() and speedup is None:
        raise UserFacingError(f"ncu details CSV line {line_number}: Estimated Speedup is {speedup_text!r}, "
                              "not a number")
    return RuleFinding(section=section, rule=row["Rule Name"], type=row.get("Rule Type", ""),
                       description=" ".join(row.get("Rule Description", "").split()),
                       estimated_speedup_type=row.get("Estimated Speedup Type", ""), estimated_speedup=speedup)


# ---------------------------------------------------------------------------------------------------
# Rendering for people and LLM agents
# ---------------------------------------------------------------------------------------------------

# Detail levels of a kernel's block, richest first; the renderer steps kernels down until all fit.
_FULL, _FIRST_SENTENCE, _RULE_NAMES, _ONE_LINE = 3, 2, 1, 0
_RULE_SENTENCE_CHARS = 220
_TOP_STALLS = 4
_TOP_PIPES = 3


def render_findings(report: NcuReport, max_chars: int = 4000) -> str:
    """Each kernel in launch order: launch config, time, throughputs, occupancy, top stalls, OPT findings.

    Within `max_chars`: kernels that take the least GPU time lose detail first (rule text, then rule lines,
    then all but one line); if even one line each does not fit, the shortest kernels are left out and
    counted in a closing line.
    """
    total_ns = report.total_gpu_time_ns
    head = (f"ncu: {report.kernel_count} kernel launch(es) in launch order, GPU time {_format_ns(total_ns)}, "
            f"{report.total_elapsed_cycles:,.0f} elapsed cycles")
    blocks = [[_render_kernel(kernel, total_ns, level) for level in range(_FULL + 1)] for kernel in report.kernels]
    least_important_first = sorted(range(len(blocks)), key=lambda i: report.kernels[i].duration_ns or 0.0)
    levels = [_FULL] * len(blocks)

    def length(shown: list[int]) -> int:
        return len(head) + sum(len(blocks[i][levels[i]]) + 1 for i in shown)

    shown = list(range(len(blocks)))
    while length(shown) > max_chars and max(levels, default=_ONE_LINE) > _ONE_LINE:
        top = max(levels)
        victim = next(i for i in least_important_first if levels[i] == top)
        levels[victim] -= 1
    # Stepping down in turns can overshoot; give the room left back to the longest-running kernels.
    for index in reversed(least_important_first):
        while levels[index] < _FULL:
            levels[index] += 1
            if length(shown) > max_chars:
                levels[index] -= 1
                break
    omitted: list[int] = []

    def fits() -> bool:
        closing = len(_omitted_line(report, omitted)) + 1 if omitted else 0
        return length(shown) + closing <= max_chars

    while shown and not fits():
        omitted.append(least_important_first[len(omitted)])
        shown = [i for i in shown if i not in omitted]
    parts = [head, *(blocks[i][levels[i]] for i in shown)]
    if omitted:
        parts.append(_omitted_line(report, omitted))
    text = "\n".join(parts)
    return text if len(text) <= max_chars else text[: max(max_chars - 1, 0)] + "…"


def _omitted_line(report: NcuReport, omitted: list[int]) -> str:
    time_ns = sum(report.kernels[i].duration_ns or 0.0 for i in omitted)
    return f"(+{len(omitted)} more kernel(s), {_format_ns(time_ns)} in all, not shown)"


def _render_kernel(kernel: KernelProfile, total_ns: float, level: int) -> str:
    duration = kernel.duration_ns
    share = f" ({100 * duration / total_ns:.0f}% of GPU time)" if duration and total_ns else ""
    cycles = f", {kernel.elapsed_cycles:,.0f} cycles" if kernel.elapsed_cycles is not None else ""
    title = f"#{kernel.id} {kernel.short_name}: {_format_ns(duration)}{share}{cycles}"
    if level == _ONE_LINE:
        return (f"{title}; SM {_pct(kernel.sm_throughput_pct)}, mem {_pct(kernel.memory_throughput_pct)}, "
                f"occupancy {_pct(kernel.achieved_occupancy_pct)}")
    lines = [title, f"  {_launch_line(kernel)}", f"  {_throughput_line(kernel)}", f"  {_occupancy_line(kernel)}"]
    lines += [f"  {line}" for line in (_stall_line(kernel), _pipe_line(kernel)) if line]
    lines += [f"  {_rule_line(rule, level)}" for rule in kernel.optimization_findings()]
    return "\n".join(lines)


def _launch_line(kernel: KernelProfile) -> str:
    registers = "? regs" if kernel.registers_per_thread is None else f"{kernel.registers_per_thread} regs/thread"
    shared = "? B" if kernel.shared_memory_bytes is None else f"{kernel.shared_memory_bytes:,} B"
    return (f"grid {_dim3(kernel.grid_size)} x block {_dim3(kernel.block_size)}, {registers}, "
            f"{shared} shared/block")


def _throughput_line(kernel: KernelProfile) -> str:
    return (f"throughput % of peak: SM {_pct(kernel.sm_throughput_pct)}, memory "
            f"{_pct(kernel.memory_throughput_pct)} (DRAM {_pct(kernel.dram_throughput_pct)}, L2 "
            f"{_pct(kernel.l2_throughput_pct)}, L1 {_pct(kernel.l1_throughput_pct)}); hit rate L1 "
            f"{_pct(kernel.l1_hit_rate_pct)}, L2 {_pct(kernel.l2_hit_rate_pct)}")


def _occupancy_line(kernel: KernelProfile) -> str:
    ipc = "?" if kernel.executed_ipc is None else f"{kernel.executed_ipc:.2f}"
    spill = kernel.local_spill_overhead_pct
    spill_text = f"; local spill overhead {spill:.1f}%" if spill else ""
    return (f"occupancy {_pct(kernel.achieved_occupancy_pct)} achieved / "
            f"{_pct(kernel.theoretical_occupancy_pct)} theoretical; a warp eligible in "
            f"{_pct(kernel.eligible_cycles_pct)} of cycles; IPC {ipc}{spill_text}")


def _stall_line(kernel: KernelProfile) -> str:
    stalls = kernel.stall_reasons()[:_TOP_STALLS]
    per_issue = kernel.cycles_per_issued_instruction
    if not stalls or not per_issue:
        return ""
    listed = ", ".join(f"{s.name.lower()} {s.cycles:.1f} ({100 * s.cycles / per_issue:.0f}%)" for s in stalls)
    return f"stall cycles per issued instruction ({per_issue:.1f} in all): {listed}"


def _pipe_line(kernel: KernelProfile) -> str:
    pipes = [p for p in kernel.pipe_utilization()[:_TOP_PIPES] if p.percent > 0]
    return "busiest pipes (% of active cycles): " + ", ".join(f"{p.name} {p.percent:.1f}" for p in pipes) \
        if pipes else ""


def _rule_line(rule: RuleFinding, level: int) -> str:
    speedup = "" if rule.estimated_speedup is None else \
        f" est. speedup {rule.estimated_speedup:g}% ({rule.estimated_speedup_type or 'n/a'})"
    head = f"OPT {rule.rule}{speedup}"
    if level == _RULE_NAMES:
        return head
    description = rule.description if level == _FULL else _first_sentence(rule.description)
    return f"{head}: {description}"


def _first_sentence(text: str) -> str:
    sentence = _SENTENCE_END.split(text, maxsplit=1)[0]
    return sentence if len(sentence) <= _RULE_SENTENCE_CHARS else sentence[: _RULE_SENTENCE_CHARS - 1] + "…"


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}%"


def _dim3(dims: tuple[int, int, int]) -> str:
    return "(" + ",".join(str(d) for d in dims) + ")"


def _format_ns(ns: float | None) -> str:
    if ns is None or math.isnan(ns):
        return "? us"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} us" if ns >= 1e3 else f"{ns:.0f} ns"
