"""Prompts are ordered static-first (instructions, then what is the same for the whole run, then what
varies), so that provider-side prefix caching applies across the steps of one problem."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from string import Template

import pytest
from fixtures.graph.recorded_evaluator import EvaluationLog
from fixtures.graph.scenario import (
    applies_first_offered,
    chat_models,
    initial_kernel,
    run_graph,
    services_for,
    small_context,
)

from kernelblaster.nodes.prompting import STATIC_FIELDS, check_static_first

PROMPTS = resources.files("kernelblaster.nodes").joinpath("prompts")


def _prompt_names() -> list[str]:
    return sorted(entry.name.removesuffix(".user.txt") for entry in PROMPTS.iterdir()
                  if entry.name.endswith(".user.txt"))


def _fields(text: str) -> list[str]:
    """The `${field}` / `$field` names of a prompt template, in the order they appear."""
    return [field for match in Template.pattern.finditer(text)
            if (field := match.group("named") or match.group("braced"))]


@pytest.mark.parametrize("name", _prompt_names())
def test_every_prompt_puts_its_static_fields_before_the_varying_ones(name: str) -> None:
    fields = _fields(PROMPTS.joinpath(f"{name}.user.txt").read_text())
    varying = [field not in STATIC_FIELDS for field in fields]  # static-first is False before True
    assert fields, f"prompt {name} has no fields to order"
    assert varying == sorted(varying), f"prompt {name} has a static field after a varying one: {fields}"


def test_a_prompt_with_a_static_field_after_a_varying_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"static field \$\{header\} comes after the varying \$\{current_source\}"):
        check_static_first("bad", Template("${pytorch_source}\n${current_source}\n${header}\n"))


def test_the_lowering_prompts_of_a_run_share_their_prefix_through_the_problem_and_header(tmp_path: Path) -> None:
    models = chat_models([initial_kernel(), applies_first_offered("ok 0.5"), applies_first_offered("ok 0.4")])
    run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=2))
    first, second = [prompt for prompt in models["lowering"].prompts if "## The current CUDA" in prompt[1].content]
    assert first[0].content == second[0].content
    shared = _common_prefix(str(first[1].content), str(second[1].content))
    for static in ("kb_problem.h", "## The GPU", "## Precision contract (policy: strict)", "## Targets"):
        assert static in shared
    assert shared.rstrip("0123456789.").endswith("## The current CUDA (")


def _common_prefix(first: str, second: str) -> str:
    length = next((n for n, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), len(first))
    return first[:length]


@pytest.mark.parametrize("precision", ["strict", "tf32"])
def test_the_soft_verifier_sees_the_header_and_the_runs_precision_policy(tmp_path: Path, precision: str) -> None:
    models = chat_models([initial_kernel(), applies_first_offered("ok 0.5")])
    run_graph(services_for(models, EvaluationLog()), small_context(tmp_path, depth=1, precision=precision))
    system, user = models["soft_verifier"].prompts[0]
    header = "## kb_problem.h (generated from the model)\n```c\n// kb_problem.h for elementwise_swish_scale"
    assert header in user.content
    assert f"Precision policy: {precision}." in user.content
    assert "strict: fp32 accuracy where the model computes in fp32" in system.content
    assert "was not measured (a recorded evaluator measures nothing)" in user.content
    assert user.content.index("kb_problem.h") < user.content.index("## The CUDA implementation")
