"""The command line answers at once: building the parser, `--help` and the KB commands import neither torch
nor LangGraph (nor Chroma), which take seconds to import (issue 9, item 7). Timings themselves are measured
by `benchmarks/cli_startup.py`, not asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

HEAVY = ("torch", "langgraph", "langchain_core", "chromadb", "openai")

# Runs the CLI in a fresh interpreter and prints which heavy packages it imported.
PROBE = """
import json, sys
from kernelblaster.graph.app.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exit_request:
    status = exit_request.code
print(json.dumps({"status": status, "heavy": sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))}))
"""


def _probe(*argv: str, cwd: Path | None = None) -> dict[str, object]:
    finished = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{PROBE}", *argv], capture_output=True,
                              text=True, timeout=120, cwd=cwd, check=False)
    probed: dict[str, object] = json.loads(finished.stdout.strip().splitlines()[-1])
    return probed


@pytest.mark.parametrize("argv", [["--help"], ["optimize", "--help"], ["eval", "--help"], ["kb", "stats", "--help"],
                                  ["runs", "--help"]])
def test_help_imports_neither_torch_nor_langgraph(argv: list[str]) -> None:
    assert _probe(*argv) == {"status": 0, "heavy": []}


def test_kb_stats_imports_neither_torch_nor_langgraph(tmp_path: Path) -> None:
    assert _probe("kb", "init", str(tmp_path / "kb.json"))["status"] == 0
    assert _probe("kb", "stats", "--kb", str(tmp_path / "kb.json")) == {"status": 0, "heavy": []}


def test_a_bad_flag_is_refused_before_anything_heavy_is_imported(tmp_path: Path) -> None:
    assert _probe("optimize", "problem.py", "--depth", "0", cwd=tmp_path) == {"status": 2, "heavy": []}


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    from kernelblaster.graph.app.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"kernelblaster {metadata.version('kernelblaster')}\n"
