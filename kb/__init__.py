"""The knowledge base: performance states, optimizations with learned scores, their index and selection.

Its public names, re-exported here from the modules that define them (where the project's own code imports
them from):
- `KnowledgeBase.load(path)`: the store (`nearest_states`, `select_optimizations` under the run's precision
  policy, `record_outcome(s)`, `apply_edits`, `prune`, `write_snapshot` / `restore_snapshot`);
- `PRECISION_POLICIES`: the policy names techniques may be restricted to;
- `load_snippet`, `starting_point_for`: the shipped, verified CUDA snippets, and the one a first kernel of a
  GEMM or convolution problem starts from;
- `OutcomeEvent` / `EventId`: one measured (or failed) rollout step;
- `KBEdit` and its kinds: what the learning step may propose; `EditResult`: what became of it;
- `render_prompt_slice`: the KB as a lowering agent sees it;
- `SIGNATURE_FIELDS`: the 24-value signature layout shared with the harness.
"""

from kernelblaster.kb.edits import (
    AddLesson,
    AddOptimization,
    AddState,
    Deprecate,
    EditResult,
    KBEdit,
    MergeStates,
    SetDescription,
    SetPrior,
)
from kernelblaster.kb.index import StateMatch
from kernelblaster.kb.outcomes import EventId, OutcomeEvent
from kernelblaster.kb.precision import PRECISION_POLICIES
from kernelblaster.kb.prompt_slice import render_prompt_slice
from kernelblaster.kb.schema import OutcomeStatus, PerformanceState
from kernelblaster.kb.selection import SelectedOptimization, SelectionPolicy
from kernelblaster.kb.signature_fields import SIGNATURE_FIELDS
from kernelblaster.kb.snippets import Snippet, StartingPoint, load_snippet, starting_point_for
from kernelblaster.kb.store import KnowledgeBase

__all__ = [
    "PRECISION_POLICIES",
    "SIGNATURE_FIELDS",
    "AddLesson",
    "AddOptimization",
    "AddState",
    "Deprecate",
    "EditResult",
    "EventId",
    "KBEdit",
    "KnowledgeBase",
    "MergeStates",
    "OutcomeEvent",
    "OutcomeStatus",
    "PerformanceState",
    "SelectedOptimization",
    "SelectionPolicy",
    "SetDescription",
    "SetPrior",
    "Snippet",
    "StartingPoint",
    "StateMatch",
    "load_snippet",
    "render_prompt_slice",
    "starting_point_for",
]
