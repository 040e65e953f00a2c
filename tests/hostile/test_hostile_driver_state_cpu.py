"""Without a GPU: the driver's own numbers and the workspace poisoning are out of the candidate's reach. The
driver's number conversions (kb_json.h) are run in a process switched to a decimal comma; a driver whose
candidate made that switch in its sandbox still reads fractional numbers; the rules name the locale calls; and
the workspace wrappers carry no switch that code in the candidate's process could find and clear."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hostile.hostile_cases import HOSTILE_CASES, PARTS_DIR, SWISH, HostileCase, with_parts
from hostile.unchecked import rules_switched_off

from kernelblaster.harness.analysis import spec_for_problem
from kernelblaster.harness.build import DRIVER_DIR, BuildResult, build_candidate
from kernelblaster.harness.header import generate_header
from kernelblaster.harness.problem import load_problem
from kernelblaster.tools.sandbox import Sandbox, prepare

ARCH = "sm_90"


def case_named(name: str) -> HostileCase:
    return next(case for case in HOSTILE_CASES if case.name == name)


LOCALE = case_named("locale_decimal_comma")
FLAG = case_named("workspace_flag_cleared")

# The driver's conversions, in a process the candidate's part switched to a decimal comma; `format` prints what
# the driver would reply, `parse` what it reads from a request.
CONVERSIONS = r"""
#include <cstdio>
#include <cstring>
#include <string>
#include "kb_json.h"
#include "decimal_comma.h"

int main(int argc, char** argv) {
  if (!switch_to_decimal_comma()) return 2;
  if (argc > 1 && std::strcmp(argv[1], "format") == 0) {
    for (double v : {0.123456789012, 1234567.25, 1.0e-5, 2.5e12, -0.5})
      std::printf("%s\n", kbjson::format_double(v).c_str());
    std::printf("%s\n", kbjson::format_integer(1234567).c_str());
    return 0;
  }
  kbjson::Value request = kbjson::Parser(argv[2]).parse_document();
  for (const auto& member : request.members) {  // the double's bits: this program's own printf has the comma
    unsigned long long bits = 0;
    std::memcpy(&bits, &member.second.number, sizeof bits);
    std::printf("%s %llx %d %lld\n", member.first.c_str(), bits, member.second.is_integer,
                static_cast<long long>(member.second.integer));
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def conversions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("g++") or shutil.which("c++")
    assert compiler is not None, "a C++ compiler (nvcc's host compiler) is needed"
    folder = tmp_path_factory.mktemp("conversions")
    (folder / "conversions.cpp").write_text(CONVERSIONS)
    program = folder / "conversions"
    subprocess.run([compiler, "-std=c++17", "-O1", "-I", str(DRIVER_DIR), "-I", str(PARTS_DIR),
                    str(folder / "conversions.cpp"), "-o", str(program)], check=True, capture_output=True)
    return program


def run_conversions(program: Path, *args: str) -> tuple[list[str], str]:
    finished = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=60, check=False)
    assert finished.returncode == 0, finished.stderr
    return finished.stdout.splitlines(), finished.stderr


def test_the_drivers_numbers_are_written_as_in_the_c_locale_under_a_decimal_comma(conversions: Path) -> None:
    lines, stderr = run_conversions(conversions, "format")
    assert "decimal comma on: 0.5 is now 0,5" in stderr  # the switch took: C's own printf writes a comma
    expected = [f"{v:.9g}" for v in (0.123456789012, 1234567.25, 1.0e-5, 2.5e12, -0.5)] + ["1234567"]
    assert lines == expected


def bits(value: float) -> str:
    return f"{struct.unpack('<Q', struct.pack('<d', value))[0]:x}"


def test_the_driver_reads_a_requests_fractional_and_large_numbers_under_a_decimal_comma(conversions: Path) -> None:
    lines, stderr = run_conversions(conversions, "parse", '{"half":0.5,"big":1234567,"small":-2.5e-3}')
    assert "decimal comma on" in stderr
    assert lines == [f"half {bits(0.5)} 0 0", f"big {bits(1234567.0)} 1 1234567", f"small {bits(-2.5e-3)} 0 0"]


class LocaleBuilds:
    def __init__(self, root: Path, sandbox: Sandbox) -> None:
        self.root, self.sandbox = root, sandbox
        self.header = generate_header(spec_for_problem(load_problem(SWISH), gpu=None))

    def build(self, name: str, source: str, *, rules: bool) -> BuildResult:
        if rules:
            return build_candidate(source, self.header, self.root / name, arch=ARCH, allow=frozenset(),
                                   cache_dir=self.root / "cache", sandbox=self.sandbox)
        with rules_switched_off():
            return build_candidate(source, self.header, self.root / name, arch=ARCH, allow=frozenset(),
                                   cache_dir=self.root / "cache", sandbox=self.sandbox)


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory, sandbox: Sandbox) -> LocaleBuilds:
    return LocaleBuilds(tmp_path_factory.mktemp("driver-state"), sandbox)


def test_the_object_check_names_setlocale_and_std_locale_global_in_their_own_refusals(builds: LocaleBuilds) -> None:
    built = builds.build("locale", case_named("locale_global_numpunct").candidate_source(), rules=True)
    named = {v.text for v in built.violations if v.rule == "unlisted_import"}
    assert built.stage == "static_violation"
    assert {"setlocale", "std::locale::global(std::locale const&)"} <= named, named


# The hostile part's switch, also at load time: in the sandbox, before the driver reads its first request.
AT_LOAD = "\n__attribute__((constructor)) static void switch_at_load() { switch_to_decimal_comma(); }\n"


def test_a_driver_whose_candidate_switched_to_a_decimal_comma_in_the_sandbox_reads_fractional_numbers(
        builds: LocaleBuilds, sandbox: Sandbox) -> None:
    built = builds.build("locale-at-load", LOCALE.candidate_source() + AT_LOAD, rules=False)
    assert built.program is not None, built.log
    launch = prepare(built.program.command(filtered=True), built.program.view(), sandbox)
    # Under a decimal comma, strtod would stop at the '.' of 0.5: a malformed request, answered without its seq.
    probe = ['{"cmd":"dance","seq":1,"scale":0.5}', '{"cmd":"exit","seq":2}']
    finished = subprocess.run(launch.argv, env=launch.env, input="".join(line + "\n" for line in probe),
                              capture_output=True, text=True, timeout=60, check=False)
    assert "decimal comma on: 0.5 is now 0,5" in finished.stderr, finished.stderr[-2000:]
    replies = [json.loads(line) for line in finished.stdout.splitlines()]
    assert [(reply.get("seq"), reply["ok"]) for reply in replies] == [(0, True), (1, False), (2, True)], replies
    assert "unknown cmd 'dance'" in replies[1]["error"]


def wrapper_bodies(linked: Path) -> dict[str, str]:
    """The disassembly of each workspace wrapper (`__wrap_cudaMalloc...`) in the linked library."""
    disassembly = subprocess.run(["objdump", "-d", str(linked)], capture_output=True, text=True,
                                 check=True).stdout
    return {name: body for name, body in re.findall(r"<(__wrap_\w+)>:\n(.*?)(?:\n\n|\Z)", disassembly, re.S)}


def test_the_workspace_wrappers_load_no_address_a_candidate_could_take_for_a_switch(builds: LocaleBuilds) -> None:
    # workspace_flag_cleared reads the wrapper's `mov reg, [rip+disp32]` to find the flag it clears: the
    # wrappers must hold no such load (they used to load the driver's poisoning flag from the GOT this way).
    built = builds.build("flag", FLAG.candidate_source(), rules=True)
    assert built.program is not None, [v.message for v in built.violations] or built.log
    bodies = wrapper_bodies(built.program.library)
    assert set(bodies) >= {"__wrap_cudaMalloc", "__wrap_cudaMallocAsync", "__wrap_cudaMallocPitch",
                           "__wrap_cudaMallocFromPoolAsync"}
    loads = {name: re.findall(r"mov\s+0x[0-9a-f]+\(%rip\),%r\w+", body) for name, body in bodies.items()}
    assert all(not found for found in loads.values()), loads


def test_the_flag_clearing_candidate_passes_the_rules_so_only_the_missing_switch_stops_it(
        builds: LocaleBuilds) -> None:
    built = builds.build("flag-rules", FLAG.candidate_source(), rules=True)
    assert built.stage == "ok", [v.message for v in built.violations] or built.log


def test_the_decimal_comma_part_is_compiled_into_the_locale_candidate() -> None:
    assert "switch_to_decimal_comma()" in with_parts(case_named("locale_decimal_comma").source.read_text())
