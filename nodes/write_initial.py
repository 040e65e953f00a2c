"""`write_initial`: the first CUDA of the run — the `--init` file, or written by the lowering agent from
the PyTorch source, shown the GPU, the precision contract and the targets, the catalogue's technique names
that fit the problem (for its `technique:` line), for a softmax, norm, reduction or loss the rows it reduces
and the design that fits them, and for a GEMM or convolution problem the verified tiled
code to start from, with the alternative the precision policy admits (`kb.snippets.starting_points_for`). On
a retry (the last draft failed to build or verify) the agent fixes the last draft, shown why it failed.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import ProgressNote, write_note
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import OptimizationState, RunUpdate
from kernelblaster.graph.llm.agents import AgentFailed, Question
from kernelblaster.nodes.briefing import (
    catalogue_section,
    gpu_section,
    precision_section,
    rows_section,
    starting_point_section,
    targets_section,
)
from kernelblaster.nodes.kernels import CudaAnswer, check_cuda, feedback_section, save_candidate
from kernelblaster.nodes.prompting import load_prompt


def write_initial(state: OptimizationState, runtime: Runtime[RunContext], *,
                  resources: RunResources) -> RunUpdate:
    label = f"initial-a{state.initial_attempts}"
    if state.init_kernel and state.initial_attempts == 0:
        answer = CudaAnswer(explanation=f"given with --init {state.init_kernel}",
                            cuda_source=resources.files.read(state.init_kernel))
        write_note(runtime, ProgressNote(node="write_initial", text=f"initial CUDA from {state.init_kernel}"))
        return {"draft": save_candidate(resources.files, answer, label)}
    try:
        reply = resources.ask(_question(state, resources, label))
    except AgentFailed as failure:
        write_note(runtime, ProgressNote(node="write_initial", text=f"no initial CUDA: {failure}"))
        return {"draft": None, "token_usage": [failure.usage]}
    write_note(runtime, ProgressNote(node="write_initial", text=f"initial CUDA written ({label})"))
    return {"draft": save_candidate(resources.files, reply.value, label), "token_usage": [reply.usage]}


def _question(state: OptimizationState, resources: RunResources, label: str) -> Question[CudaAnswer]:
    context = resources.context
    catalogue = ""
    if context.uses_kb:  # a run without memory (an ablation) is shown no KB, its catalogue included
        with resources.knowledge_base() as kb:
            techniques = dict(kb.document.techniques)
        catalogue = catalogue_section(techniques, state.facts.operations if state.facts else None, context.precision)
    return load_prompt("write_initial").question(
        role="lowering", node="write_initial", key=f"{label}.write_initial", schema=CudaAnswer, check=check_cuda,
        pytorch_source=resources.problem.source, header=resources.header, gpu=gpu_section(state.facts),
        precision=precision_section(context.precision, context.seeds, state.facts),
        allowed_libraries=", ".join(context.allow) or "none", targets=targets_section(state.facts, None),
        rows=rows_section(state.facts),
        starting_point=starting_point_section(resources.problem.source, context.precision), catalogue=catalogue,
        feedback=feedback_section(resources.files, state.initial_feedback),
    )
