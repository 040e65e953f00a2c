"""The profile the harness attaches to an evaluation result: ncu's parsed details page, its totals, the
state signature and the rendering shown to the agents, or a note that profiling was unavailable.

Running the driver under ncu and exporting the CSV happen elsewhere; this module turns that CSV text into
the typed result.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from kernelblaster.harness.profile.findings import render_findings
from kernelblaster.harness.profile.report import NcuReport, parse_details_csv
from kernelblaster.harness.profile.signature import describe_signature, signature_from_report
from kernelblaster.kb.signature_fields import SIGNATURE_FIELDS

DEFAULT_FINDINGS_CHARS = 4000


class ProfileReport(BaseModel):
    """A successful profile of every kernel one call launched, in launch order."""

    status: Literal["ok"] = Field(default="ok", description="`ok`: a profile was taken")
    ncu: NcuReport = Field(description="ncu's details page, parsed: every kernel with its metrics and rule results")
    kernel_count: int = Field(description="Kernels one call launched")
    total_elapsed_cycles: float = Field(description="Sum of the kernels' elapsed cycles (the paper's metric)")
    total_gpu_time_ns: float = Field(description="Sum of the kernels' durations under the profiler, ns")
    signature_fields: tuple[str, ...] = Field(default=SIGNATURE_FIELDS,
                                              description="Names of the signature's entries, in order")
    signature: list[float] = Field(description="The performance-state signature the KB indexes, in [0, 1] each")
    signature_summary: str = Field(description="The signature in words")
    findings: str = Field(description="The profile rendered for the agents: bottlenecks and ncu's advice")


class ProfileUnavailable(BaseModel):
    """No profile, and why (ncu missing, no permission for the counters, ...); the evaluation goes on."""

    status: Literal["unavailable"] = Field(default="unavailable", description="`unavailable`: no profile")
    reason: str = Field(description="Why not (ncu missing, no permission for the counters, a failed run ...)")


ProfileOutcome = Annotated[ProfileReport | ProfileUnavailable, Field(discriminator="status")]


class KernelShare(BaseModel):
    """One kernel function's part of a profiled call (its launches together)."""

    name: str = Field(description="The kernel function's name, without its parameter list")
    launches: int = Field(description="How many times the call launched it")
    time_ms: float = Field(description="Its launches' GPU time under the profiler, ms")
    share: float = Field(description="Its part of the call's GPU time, from 0 to 1")


def top_kernels(report: ProfileReport, count: int) -> list[KernelShare]:
    """The `count` kernel functions that took the most GPU time in the profiled call, the longest first."""
    launches: dict[str, list[float]] = {}
    for kernel in report.ncu.kernels:
        launches.setdefault(kernel.short_name, []).append(kernel.duration_ns or 0.0)
    total_ns = report.total_gpu_time_ns
    shares = [KernelShare(name=name, launches=len(times), time_ms=sum(times) / 1e6,
                          share=sum(times) / total_ns if total_ns else 0.0) for name, times in launches.items()]
    return sorted(shares, key=lambda kernel: -kernel.time_ms)[:count]


def build_profile_report(details_csv: str, *, findings_chars: int = DEFAULT_FINDINGS_CHARS) -> ProfileReport:
    """Parse an ncu details CSV (see tools.ncu.export_details) into the harness's profile."""
    report = parse_details_csv(details_csv)
    signature = signature_from_report(report)
    return ProfileReport(
        ncu=report,
        kernel_count=report.kernel_count,
        total_elapsed_cycles=report.total_elapsed_cycles,
        total_gpu_time_ns=report.total_gpu_time_ns,
        signature=signature,
        signature_summary=describe_signature(signature),
        findings=render_findings(report, findings_chars),
    )
