"""Published KernelBench results to set beside a suite's own, each with its source and protocol: numbers
measured another way are context, not a leaderboard.
"""

from __future__ import annotations

from pydantic import BaseModel


class PublishedResult(BaseModel):
    """Geometric-mean speedups per level (1, 2, 3) against one baseline, as published."""

    system: str
    against: str
    level_geomeans: dict[int, float]
    source: str
    protocol: str


CUDA_AGENT_SOURCE = "CUDA Agent: Large-Scale Agentic RL for High-Performance CUDA Kernel Generation, arXiv 2602.24286"

PUBLISHED: tuple[PublishedResult, ...] = (
    PublishedResult(
        system="KernelBlaster (paper)", against="faster of eager and torch.compile",
        level_geomeans={1: 1.43, 2: 2.50, 3: 1.50},
        source="KernelBlaster, arXiv 2602.14293, abstract",
        protocol="GPT-4.1 and GPT-5 agents; 10 iterations of 10 rollout steps; times are the sum of the NCU "
                 "elapsed cycles of all kernels, for kernel and baseline alike; level 3 is a subset; A6000, A100, "
                 "H100 and L40S GPUs",
    ),
    PublishedResult(
        system="CUDA Agent", against="PyTorch eager", level_geomeans={1: 2.48, 2: 3.27, 3: 1.80},
        source=CUDA_AGENT_SOURCE,
        protocol="RL-trained agent; see its paper for the model, hardware and timing protocol before comparing",
    ),
    PublishedResult(
        system="CUDA Agent", against="torch.compile", level_geomeans={1: 1.87, 2: 2.80, 3: 1.52},
        source=CUDA_AGENT_SOURCE,
        protocol="RL-trained agent; see its paper for the model, hardware and timing protocol before comparing",
    ),
)

OUR_PROTOCOL = (
    "Each problem's best correct kernel (verified on several seeds, special values, refilled inputs and "
    "repeated calls) against PyTorch eager and torch.compile timed by the same method: median of many calls "
    "with warm-up, L2 flush and rotating inputs, CUDA events cross-checked by a host clock. Speedup "
    "statistics are over problems with a valid kernel; fast_p is over all problems."
)
