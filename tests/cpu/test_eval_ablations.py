"""Ablation switches across a suite: recorded in its configuration, handed to every problem's run, and
changing what the agents are shown: a learning suite shows the second problem what the first one learned,
a frozen one never does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fixtures.suite.scripted_suite import KERNELBENCH, services_factory, suite_config

from kernelblaster.eval.problems import select_problems
from kernelblaster.eval.runner import start_suite
from kernelblaster.eval.suite import Suite, open_suite

EVIDENCE = "1 attempt, 1 measured"


@dataclass(frozen=True)
class SuiteRun:
    """A finished suite: its directory, and the folder holding every prompt its agents were shown."""

    root: Path
    prompts: Path


def _suite(tmp_path: Path, name: str, context: dict[str, object] | None = None, **overrides: object) -> SuiteRun:
    problems = select_problems(KERNELBENCH, [1], {19, 23})
    root, prompts = tmp_path / name, tmp_path / f"{name}-prompts"
    context = {"top_k": 32, "depth": 1} | (context or {})
    start_suite(root, suite_config(problems, window=1, gpus=(0,), context=context, **overrides),
                services_factory(prompts))
    return SuiteRun(root, prompts)


@contextmanager
def _opened(run: SuiteRun) -> Iterator[Suite]:
    suite = open_suite(run.root)
    try:
        yield suite
    finally:
        suite.db.close()


def _lowering_prompts(run: SuiteRun) -> list[str]:
    prompts = [path.read_text() for path in run.prompts.glob("lowering-*.txt")]
    assert prompts, f"the suite's lowering agent was shown no prompt (none in {run.prompts})"
    return prompts


def _step_prompts(run: SuiteRun) -> list[str]:
    """The lowering prompts of optimization steps (those showing the current kernel), never empty."""
    steps = [prompt for prompt in _lowering_prompts(run) if "current CUDA" in prompt]
    assert steps, "the suite's lowering agent was shown no step prompt"
    return steps


@pytest.fixture(scope="module")
def learning(tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    return _suite(tmp_path_factory.mktemp("ablations"), "learning")


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    return _suite(tmp_path_factory.mktemp("ablations"), "frozen", memory="frozen", context={"memory": "frozen"})


def test_a_learning_suite_shows_later_problems_what_earlier_ones_measured(learning: SuiteRun) -> None:
    assert any(EVIDENCE in prompt for prompt in _lowering_prompts(learning))


def test_a_frozen_suite_never_shows_later_problems_what_earlier_ones_measured(frozen: SuiteRun) -> None:
    assert not any(EVIDENCE in prompt for prompt in _lowering_prompts(frozen))


def test_a_frozen_suite_still_shows_every_step_the_kbs_performance_states(frozen: SuiteRun) -> None:
    assert all("Performance state:" in prompt for prompt in _step_prompts(frozen))


def test_a_frozen_suite_never_writes_a_kb_version_past_its_start(frozen: SuiteRun) -> None:
    with _opened(frozen) as suite:
        assert [version.version for version in suite.db.versions()] == [0]


def test_a_frozen_suite_is_recorded_as_the_memory_frozen_ablation(frozen: SuiteRun) -> None:
    with _opened(frozen) as suite:
        assert suite.config.ablation == "memory frozen"


@pytest.mark.parametrize(("settings", "ablation"), [
    ({"memory": "none", "context": {"memory": "none"}}, "memory none"),
    ({"context": {"profile_feedback": "cycles-only"}}, "memory fresh, signature cycles-only"),
    ({"context": {"agent": "minimal"}}, "memory fresh, agent minimal"),
])
def test_each_switch_is_recorded_and_reaches_every_problems_run(tmp_path: Path, settings: dict[str, Any],
                                                               ablation: str) -> None:
    run = _suite(tmp_path, "suite", **settings)

    with _opened(run) as suite:
        rows = suite.db.problems()
        assert suite.config.ablation == ablation
    for row in rows:
        context = json.loads((Path(row.run_dir or "") / "run.json").read_text())["context"]
        assert {key: context[key] for key in settings.get("context", {})} == settings.get("context")
    shows_kb = ["Performance state:" in prompt for prompt in _step_prompts(run)]
    assert all(shows_kb) if "cycles-only" in ablation else not any(shows_kb)
