"""What the profile of a measured kernel says, in the forms the prompts and the KB need: its signature, the
signature's one-line reading, and the findings text. Read by the state extraction, the lowering and the
gap analysis. With cycles-only profile feedback (an ablation) a profile is reduced to its elapsed cycles:
no signature, no findings.
"""

from __future__ import annotations

from pydantic import BaseModel

from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import KernelRef
from kernelblaster.harness.profile.outcome import ProfileReport
from kernelblaster.nodes.kernels import read_result


class ProfileView(BaseModel):
    """What the profile of a kernel says, in the forms the prompts and the KB need."""

    signature: list[float] | None
    summary: str
    findings: str


def profile_view(resources: RunResources, kernel: KernelRef) -> ProfileView:
    result = read_result(resources.files, kernel.result)
    profile = result.profile
    if isinstance(profile, ProfileReport) and resources.context.profile_feedback == "cycles-only":
        cycles = f"{profile.total_elapsed_cycles:.0f} elapsed cycles, {kernel.time_ms:.4f} ms per call"
        return ProfileView(signature=None, summary=cycles, findings=cycles)
    if isinstance(profile, ProfileReport):
        signature = profile.signature if any(profile.signature) else None
        return ProfileView(signature=signature, summary=profile.signature_summary, findings=profile.findings)
    why = profile.reason if profile is not None else "profiling was off"
    summary = f"no profile ({why}); {kernel.time_ms:.4f} ms per call"
    return ProfileView(signature=None, summary=summary, findings=summary)
