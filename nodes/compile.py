"""`compile`: build the candidate (source checks, nvcc, link with the test driver); no GPU needed.

A failed build leaves the compiler's messages as feedback for the next lowering try, or, when the step's
compile retries are spent, ends the step as a failed attempt.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import trajectory_note, write_note
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import StepEnding, TrajectoryState, TrajectoryUpdate
from kernelblaster.nodes.kernels import compile_feedback

NODE = "compile"


def compile_candidate(state: TrajectoryState, runtime: Runtime[RunContext], *,
                      resources: RunResources) -> TrajectoryUpdate:
    step = state.this_step
    candidate = step.candidate
    assert candidate is not None, "lower wrote a candidate"
    files = resources.files
    built = resources.build(files.read(candidate.source), candidate.label)
    if built.ok:
        write_note(runtime, trajectory_note(NODE, state, "compiled"))
        return {"this_step": step.replace(feedback=None)}
    assert built.result is not None, "a failed build says why"
    files.save(files.result_path(candidate.label, "build"), built.result)
    failures = step.compile_failures + 1
    write_note(runtime, trajectory_note(NODE, state, f"build failed ({failures}): {built.result.summary[:200]}"))
    ending = (StepEnding(outcome="compile_failed", detail=built.result.summary)
              if failures > runtime.context.compile_retries else None)
    return {"this_step": step.replace(compile_failures=failures, feedback=compile_feedback(candidate, built.result),
                                      ending=ending)}
