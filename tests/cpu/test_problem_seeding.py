"""harness/problem.py: a problem materialised under a seed gets the same values however many threads materialise
problems meanwhile (torch's generators are process-wide; the timing sets' references rely on remaking an
instance under its seed)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import torch

from kernelblaster.harness.problem import ProblemInstance, instantiate, load_problem

# A model that draws half its weight, waits for the test's gate, then draws the rest: another thread
# materialising the problem meanwhile would reseed the generator between the two draws.
GATED = """
import threading

import torch
import torch.nn as nn

GATE = threading.Event()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        first = torch.randn(4)
        GATE.wait(10.0)
        self.weight = nn.Parameter(torch.cat([first, torch.randn(4)]))

    def forward(self, x):
        return x * self.weight


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
"""


def test_an_instance_made_while_another_thread_seeds_has_its_own_seeds_values(tmp_path: Path) -> None:
    path = tmp_path / "gated.py"
    path.write_text(GATED)
    problem = load_problem(path)
    gate: threading.Event = problem.get_inputs.__globals__["GATE"]
    gate.set()
    alone = instantiate(problem, 1, "cpu")
    gate.clear()
    made: dict[int, ProblemInstance] = {}

    def make(seed: int) -> None:
        made[seed] = instantiate(problem, seed, "cpu")

    first = threading.Thread(target=make, args=(1,))
    first.start()
    time.sleep(0.2)  # the first is waiting at the gate, between its two draws
    second = threading.Thread(target=make, args=(2,))
    second.start()
    time.sleep(0.2)
    gate.set()
    first.join(30.0)
    second.join(30.0)
    assert torch.equal(made[1].initial_state["weight"], alone.initial_state["weight"])
    assert torch.equal(made[1].args[0], alone.args[0])
