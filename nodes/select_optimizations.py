"""`select_optimizations`: sample the top-k optimizations of the matched state from the KB.

Sampling is weighted by expected gain, not an argmax (`kb.selection`), under a seed derived from the
run's seed and the step's place, so each trajectory explores differently and a resumed step draws the
same; a replay (`--llm replay`) draws as the recorded run drew, so its prompts are the recorded ones.
Only techniques valid under the run's precision policy, and made for operations the problem performs (the
run's facts), are drawn. Techniques already tried on this very
kernel, and the one that produced it, are left out; that one also conditions the draw (phase ordering:
what tends to work right after it).
"""

from __future__ import annotations

import hashlib

from langgraph.runtime import Runtime

from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.progress import trajectory_note, write_note
from kernelblaster.graph.core.run_files import run_id_for
from kernelblaster.graph.core.services import RunResources
from kernelblaster.graph.core.state import TrajectoryState, TrajectoryUpdate

NODE = "select_optimizations"


def select_optimizations(state: TrajectoryState, runtime: Runtime[RunContext], *,
                         resources: RunResources) -> TrajectoryUpdate:
    if state.matched is None:
        write_note(runtime, trajectory_note(NODE, state, "no KB state to draw optimizations from"))
        return {"this_step": state.this_step.replace(choices=[])}
    with resources.knowledge_base() as kb:
        kb_state = kb.document.resolve_state(state.matched.state_id)
        choices = [] if kb_state is None else kb.select_optimizations(
            kb_state, runtime.context.top_k, rng_seed=step_seed(runtime.context, state),
            precision=runtime.context.precision,
            previous_technique=state.current.technique,
            exclude=[*state.tried, *([state.current.technique] if state.current.technique else [])],
            operations=state.facts.operations if state.facts is not None else None,
        )
    text = ", ".join(f"{c.technique} ({c.expected_speedup:.2f}x)" for c in choices) or "nothing left to try"
    write_note(runtime, trajectory_note(NODE, state, text))
    return {"this_step": state.this_step.replace(choices=choices)}


def step_seed(context: RunContext, state: TrajectoryState) -> int:
    """A seed for this step's draw, the same on every replay of it: from the run directory's name, which a
    replay knows, not from the run id, whose random suffix it does not."""
    run_name = run_id_for(context.replay_from or state.run_dir)
    text = f"{context.seed}/{run_name}/{state.iteration}/{state.trajectory}/{state.step}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
