"""The suite runner on a Ray cluster: a local cluster whose two GPUs are logical resources, one task per
problem, the KB held by one actor applying each problem's learning in suite order."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.suite.scripted_suite import KERNELBENCH, services_factory, suite_config

from kernelblaster.eval.problems import select_problems
from kernelblaster.eval.results import DATABASE_NAME, ResultsDB
from kernelblaster.eval.runner import start_suite

ray = pytest.importorskip("ray")
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[None]:
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}})
    yield
    ray.shutdown()


def test_a_suite_on_a_ray_cluster_runs_every_problem_and_learns_in_suite_order(tmp_path: Path,
                                                                               local_cluster: None) -> None:
    problems = select_problems(KERNELBENCH, [1], None)
    root = tmp_path / "suite"

    start_suite(root, suite_config(problems), services_factory(), ray_address="auto")

    db = ResultsDB.open(root / DATABASE_NAME)
    rows, versions = db.problems(), db.versions()
    db.close()
    assert [row.status for row in rows] == ["done"] * 3
    assert all(row.result and row.result.verdict == "ok" and "/gpu" in (row.result.gpu or "") for row in rows)
    assert [row.kb_version_before for row in rows] == [0, 0, 1]
    assert [(v.version, v.position) for v in versions] == [(0, None), (1, 0), (2, 1), (3, 2)]
    assert versions[-1].measured == versions[0].measured + 6  # three problems, two measured steps each
