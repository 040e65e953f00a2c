"""`langgraph dev` (LangGraph Studio's server) loads the graph from langgraph.json and serves its drawing,
offline: analytics, version checks and tracing are switched off, and it listens on loopback only. A run
started there with a user's mistake shows the Studio user the same one line the CLI prints."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.cli import folder_picture
from fixtures.graph.recorded_evaluator import EvaluationLog, recorded_evaluators
from fixtures.graph.scenario import small_context

from kernelblaster.graph.app import api
from kernelblaster.graph.app.cli import main
from kernelblaster.graph.core.services import Services

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 90
OFFLINE = {"LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "true", "LANGSMITH_TRACING": "false",
           "LANGCHAIN_TRACING_V2": "false"}
EVERY_NODE = {
    "setup", "write_initial", "check_initial", "start_iteration", "policy_evaluation", "perf_gap_analysis",
    "parameter_update", "finish", *(f"trajectory:{node}" for node in (
        "extract_state", "match_state", "select_optimizations", "lower", "compile", "verify", "evaluate",
        "record_step")),
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _request(url: str, body: dict[str, object] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def studio_server() -> Iterator[str]:
    if importlib.util.find_spec("langgraph_cli") is None:
        pytest.skip("langgraph-cli[inmem] is not installed (pip install -e '.[studio]')")
    port = _free_port()
    environment = {key: value for key, value in os.environ.items() if not key.startswith("LANGSMITH_API")}
    # This interpreter's langgraph-cli, so the server imports the kernelblaster under test.
    server = subprocess.Popen(
        [sys.executable, "-m", "langgraph_cli", "dev", "--config", "langgraph.json", "--host", "127.0.0.1", "--port",
         str(port), "--no-browser", "--no-reload"],
        cwd=REPO, env=environment | OFFLINE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and server.poll() is None:
            try:
                _request(f"{url}/ok")
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"langgraph dev did not answer within {STARTUP_TIMEOUT_S} s (exit code {server.poll()})")
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _assistant_id(studio_server: str) -> str:
    (assistant,) = _request(f"{studio_server}/assistants/search", {"graph_id": "kernelblaster"})
    assistant_id: str = assistant["assistant_id"]
    return assistant_id


def test_langgraph_dev_serves_the_drawing_of_every_node_and_the_run_context_form(studio_server: str) -> None:
    assistant = {"assistant_id": _assistant_id(studio_server)}
    drawing = _request(f"{studio_server}/assistants/{assistant['assistant_id']}/graph?xray=true")
    schemas = _request(f"{studio_server}/assistants/{assistant['assistant_id']}/schemas")

    assert {node["id"] for node in drawing["nodes"]} >= EVERY_NODE
    assert {"model", "iterations", "trajectories", "depth", "top_k", "gpus"} <= set(
        schemas["context_schema"]["properties"])
    assert schemas["input_schema"]["required"] == ["problem_path"]


def test_a_studio_run_with_a_mistake_shows_the_same_line_as_the_cli(
        studio_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no_such_problem.py"
    result = _request(f"{studio_server}/runs/wait", {
        "assistant_id": _assistant_id(studio_server), "input": {"problem_path": str(missing)},
        "context": {"llm": "human"}})

    assert main(["optimize", str(missing), "--llm", "human"]) == 2
    cli_line = capsys.readouterr().err.strip().removeprefix("kernelblaster: ")
    assert result == {"__error__": {"error": "UserFacingError", "message": cli_line}}
    assert cli_line == f"the problem file {missing} does not exist"


def _run_with(studio_server: str, problem_input: dict[str, str], context: dict[str, object]) -> object:
    return _request(f"{studio_server}/runs/wait", {"assistant_id": _assistant_id(studio_server), "input": problem_input,
                                                    "context": context})


def test_a_studio_run_with_a_bad_setting_names_it_in_one_line(studio_server: str, tmp_path: Path) -> None:
    result = _run_with(studio_server, {"problem_path": str(tmp_path / "problem.py")}, {"llm": "human", "gpus": [0, 0]})
    assert result == {"__error__": {"error": "UserFacingError", "message": "gpus: lists 0 more than once"}}


@pytest.mark.parametrize(("mistake", "complaint"), [
    ("init_kernel", "the --init CUDA file {tmp}/empty.cu is empty"),
    ("run_dir", "the run directory {tmp}/empty.cu is a file"),
    ("kb_path", "KB file {tmp}/typo_kb.json: does not exist (create a new KB there with `kernelblaster kb init "
                "{tmp}/typo_kb.json`)"),
])
def test_a_studio_run_with_a_bad_file_shows_the_line_the_cli_prints_and_writes_nothing(
        mistake: str, complaint: str, studio_server: str, tmp_path: Path) -> None:
    problem = tmp_path / "problem.py"
    problem.write_text((REPO / "examples" / "problems" / "softmax_rows.py").read_text())
    (tmp_path / "empty.cu").write_text("")
    problem_input = {"problem_path": str(problem)}
    context: dict[str, object] = {"llm": "human", "run_dir": str(tmp_path / "run")}
    if mistake == "init_kernel":
        problem_input["init_kernel"] = str(tmp_path / "empty.cu")
    else:
        context[mistake] = str(tmp_path / ("empty.cu" if mistake == "run_dir" else "typo_kb.json"))
    result = _run_with(studio_server, problem_input, context)
    assert isinstance(result, dict) and result["__error__"]["message"] == complaint.format(tmp=tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["empty.cu", "problem.py"]


def test_a_studio_run_never_writes_into_a_run_the_cli_started(studio_server: str, tmp_path: Path) -> None:
    problem = tmp_path / "problem.py"
    problem.write_text((REPO / "examples" / "problems" / "softmax_rows.py").read_text())
    cli_run = api.Run.create(problem, small_context(tmp_path, llm="human"),
                             services=Services(evaluators=recorded_evaluators(EvaluationLog())))
    root = cli_run.files.root
    before = folder_picture(root)
    result = _run_with(studio_server, {"problem_path": str(problem)}, {"llm": "human", "run_dir": str(root)})
    assert result == {"__error__": {"error": "UserFacingError", "message": (
        f"the run directory {root} holds another run (continue that one with `kernelblaster resume {root}`); "
        "name a new directory")}}
    assert folder_picture(root) == before
