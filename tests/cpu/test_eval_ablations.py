"""Ablation switches across a suite: recorded in its configuration, handed to every problem's run, and
changing what the agents are shown: a learning suite shows the second problem what the first one learned,
a frozen one never does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixtures.suite.scripted_suite import KERNELBENCH, services_factory, suite_config

from kernelblaster.eval.problems import select_problems
from kernelblaster.eval.runner import start_suite
from kernelblaster.eval.suite import open_suite

EVIDENCE = "1 attempt, 1 measured"


def _suite(tmp_path: Path, name: str, context: dict[str, object] | None = None,
           **overrides: object) -> tuple[Path, Path]:
    problems = select_problems(KERNELBENCH, [1], {19, 23})
    root, prompts = tmp_path / name, tmp_path / f"{name}-prompts"
    context = {"top_k": 32, "depth": 1} | (context or {})
    start_suite(root, suite_config(problems, window=1, gpus=(0,), context=context, **overrides),
                services_factory(prompts))
    return root, prompts


def _lowering_prompts(prompts: Path) -> list[str]:
    return [path.read_text() for path in prompts.glob("lowering-*.txt")]


def test_a_learning_suite_shows_later_problems_what_earlier_ones_measured_and_a_frozen_one_does_not(
        tmp_path: Path) -> None:
    _, learning = _suite(tmp_path, "learning")
    frozen_root, frozen = _suite(tmp_path, "frozen", memory="frozen", context={"memory": "frozen"})

    assert any(EVIDENCE in prompt for prompt in _lowering_prompts(learning))
    assert not any(EVIDENCE in prompt for prompt in _lowering_prompts(frozen))
    assert all("Performance state:" in prompt for prompt in _lowering_prompts(frozen) if "current CUDA" in prompt)
    frozen_suite = open_suite(frozen_root)
    assert [version.version for version in frozen_suite.db.versions()] == [0]
    assert frozen_suite.config.ablation == "memory frozen"
    frozen_suite.db.close()


@pytest.mark.parametrize(("settings", "ablation"), [
    ({"memory": "none", "context": {"memory": "none"}}, "memory none"),
    ({"context": {"profile_feedback": "cycles-only"}}, "memory fresh, signature cycles-only"),
    ({"context": {"agent": "minimal"}}, "memory fresh, agent minimal"),
])
def test_each_switch_is_recorded_and_reaches_every_problems_run(tmp_path: Path, settings: dict[str, Any],
                                                               ablation: str) -> None:
    root, prompts = _suite(tmp_path, "suite", **settings)

    suite = open_suite(root)
    rows = suite.db.problems()
    suite.db.close()
    assert suite.config.ablation == ablation
    for row in rows:
        context = json.loads((Path(row.run_dir or "") / "run.json").read_text())["context"]
        assert {key: context[key] for key in settings.get("context", {})} == settings.get("context")
    step_prompts = [prompt for prompt in _lowering_prompts(prompts) if "current CUDA" in prompt]
    assert step_prompts
    shows_kb = ["Performance state:" in prompt for prompt in step_prompts]
    assert all(shows_kb) if "cycles-only" in ablation else not any(shows_kb)
