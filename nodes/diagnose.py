"""`diagnose`: a candidate that crashed or hung in verification goes back to the lowering agent with what is
known about why: the CUDA error, or the request that got no reply, with the driver's last output; for a crash,
compute-sanitizer's memcheck report of the same call where compute-sanitizer runs (the kernel, the source
line, the thread and the address of the faulty access). When the step's crash retries are spent, the step
ends as `crashed` instead, without running the sanitizer.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import trajectory_note, write_note
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import StepEnding, TrajectoryState, TrajectoryUpdate
from kernelblaster.nodes.kernels import read_result, run_failure_feedback

NODE = "diagnose"


def diagnose(state: TrajectoryState, runtime: Runtime[RunContext], *, resources: RunResources) -> TrajectoryUpdate:
    step = state.this_step
    candidate = step.candidate
    assert candidate is not None, "verify judged a candidate"
    files = resources.files
    result = read_result(files, files.result_path(candidate.label, "verify"))
    failures = step.run_failures + 1
    if failures > runtime.context.crash_retries:
        write_note(runtime, trajectory_note(NODE, state, f"{result.verdict} ({failures}), no tries left"))
        return {"this_step": step.replace(run_failures=failures,
                                          ending=StepEnding(outcome="crashed", detail=result.summary))}
    feedback = run_failure_feedback(resources, candidate, result)
    write_note(runtime, trajectory_note(NODE, state, f"{result.verdict} ({failures}): {feedback.message[:200]}"))
    return {"this_step": step.replace(run_failures=failures, feedback=feedback)}
