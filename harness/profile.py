"""The profile the harness attaches to an evaluation result: ncu's parsed details page, its totals, the
state signature and the rendering shown to the agents, or a note that profiling was unavailable.

Running the driver under ncu and exporting the CSV happen elsewhere; this module turns that CSV text into
the typed result.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from kernelblaster.harness.signature import SIGNATURE_FIELDS, describe_signature, signature_from_report
from kernelblaster.tools.ncu_findings import render_findings
from kernelblaster.tools.ncu_report import NcuReport, parse_details_csv

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
