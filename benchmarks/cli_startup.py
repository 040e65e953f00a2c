"""Benchmark how fast the command line answers: `--help`, `--version`, `kb stats`, and a refused flag, each a
fresh `kernelblaster` process, beside a bare Python start for scale.

Run: `python benchmarks/cli_startup.py [--repeats N]`. Targets (issue 9): `kernelblaster --help` within 1 s
and `kb stats` within 1.5 s on the 2-core CI machine. The machine may be shared, so both the median and the
fastest run are printed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wall_seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    repeats = parser.parse_args().repeats
    entry = shutil.which("kernelblaster")
    command = [entry] if entry else [sys.executable, "-m", "kernelblaster.graph"]
    with tempfile.TemporaryDirectory() as directory:
        kb = str(Path(directory) / "kb.json")
        subprocess.run([*command, "kb", "init", kb], capture_output=True, check=True)
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "kernelblaster --help": [*command, "--help"],
            "kernelblaster --version": [*command, "--version"],
            "kernelblaster kb stats": [*command, "kb", "stats", "--kb", kb],
            "optimize --depth 0 (refused)": [*command, "optimize", "p.py", "--depth", "0"],
        }
        for name, argv in cases.items():
            samples = [wall_seconds(argv) for _ in range(repeats)]
            print(f"{name:<30} median {statistics.median(samples):6.2f} s   fastest {min(samples):6.2f} s   "
                  f"({repeats} runs)")


if __name__ == "__main__":
    main()
