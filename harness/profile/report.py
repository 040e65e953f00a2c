"""The typed Nsight Compute report and how it is read: `parse_details_csv` turns the CSV of a report's
"Details" page (`tools.ncu.export_details`) into an `NcuReport`, every kernel launch in launch order with
its launch configuration, metrics and rule findings, and the totals the paper measures by.
"""

from __future__ import annotations

import csv
import io
import re

from pydantic import BaseModel, ConfigDict, computed_field

from kernelblaster.tools.errors import UserFacingError

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

REQUIRED_COLUMNS = ("ID", "Kernel Name", "Block Size", "Grid Size", "Section Name", "Metric Name",
                    "Metric Unit", "Metric Value")


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
    registers_per_thread: int | None  # registers each thread holds, as compiled
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

    @computed_field  # type: ignore[prop-decorator]  # mypy cannot type a decorated property; pydantic's documented form
    @property
    def kernel_count(self) -> int:
        return len(self.kernels)

    @computed_field  # type: ignore[prop-decorator]  # mypy cannot type a decorated property; pydantic's documented form
    @property
    def total_elapsed_cycles(self) -> float:
        return sum(k.elapsed_cycles or 0.0 for k in self.kernels)

    @computed_field  # type: ignore[prop-decorator]  # mypy cannot type a decorated property; pydantic's documented form
    @property
    def total_gpu_time_ns(self) -> float:
        return sum(k.duration_ns or 0.0 for k in self.kernels)


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
