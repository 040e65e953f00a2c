"""The hostile suite without a GPU: each candidate is refused by the rules it breaks, with one-line reasons, or
built; built with the rules switched off, every driver starts in the sandbox (its load-time attacks run before
CUDA) and is contained; a candidate's definitions of the driver's own calls never reach the driver; the compile
sandbox keeps host files out of builds, and nvcc dies with the harness."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from hostile.containment import Tripwires
from hostile.hostile_cases import BUILT_CASES, HOSTILE_CASES, SWISH, HostileCase, with_parts
from hostile.unchecked import rules_switched_off

from kernelblaster.harness.analysis import spec_for_problem
from kernelblaster.harness.build import DRIVER_DIR, BuildResult, build_candidate, files_read_outside
from kernelblaster.harness.header import generate_header
from kernelblaster.harness.problem import load_problem
from kernelblaster.tools.driver_process import DRIVER_LIMITS, DriverCrashed, DriverForged, DriverSession
from kernelblaster.tools.nvcc import MAX_OBJECT_BYTES, compile_object
from kernelblaster.tools.sandbox import SHM_BYTES, Sandbox, prepare, probe_sandbox

ARCH = "sm_90"
# Why this machine's sandbox has no cgroup bound (tools/host_bound.py); empty where it has one.
PROBED = probe_sandbox()
NO_HOST_BOUND = PROBED if isinstance(PROBED, str) else PROBED.host_bound_reason
HONEST_DIR = Path(__file__).resolve().parent / "honest"


class Builds:
    """Each hostile candidate built once for the module, in its own folder: with the rules, and with them
    switched off."""

    def __init__(self, root: Path, sandbox: Sandbox) -> None:
        self.root, self.sandbox = root, sandbox
        self._headers: dict[Path, str] = {}
        self.header = self.header_for(SWISH)
        self._built: dict[tuple[str, bool], BuildResult] = {}

    def header_for(self, problem: Path) -> str:
        """The generated header of `problem`: each case is built against its own problem's."""
        if problem not in self._headers:
            self._headers[problem] = generate_header(spec_for_problem(load_problem(problem), gpu=None))
        return self._headers[problem]

    def of(self, case: HostileCase, *, rules: bool = True) -> BuildResult:
        key = (case.name, rules)
        if key not in self._built:
            folder = self.root / (case.name if rules else f"{case.name}-unchecked")
            if rules:
                self._built[key] = self._build(case, folder)
            else:
                with rules_switched_off():
                    self._built[key] = self._build(case, folder)
        return self._built[key]

    def _build(self, case: HostileCase, folder: Path) -> BuildResult:
        return build_candidate(case.candidate_source(), self.header_for(case.problem), folder, arch=ARCH,
                               allow=frozenset(), cache_dir=self.root / "cache", sandbox=self.sandbox)


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory, sandbox: Sandbox) -> Builds:
    return Builds(tmp_path_factory.mktemp("hostile"), sandbox)


@pytest.mark.parametrize("case", HOSTILE_CASES, ids=lambda c: c.name)
def test_each_hostile_candidate_is_refused_by_the_rules_it_breaks_or_built(case: HostileCase, builds: Builds) -> None:
    built = builds.of(case)
    if not case.refused_by:
        assert built.stage == "ok", [v.message for v in built.violations] or built.log
    else:
        assert built.stage == "static_violation" and built.program is None
        assert {v.rule for v in built.violations} == case.refused_by, [v.message for v in built.violations]


HONEST_NEIGHBOURS = sorted(HONEST_DIR.glob("*.cu"))


@pytest.mark.parametrize("path", HONEST_NEIGHBOURS, ids=lambda p: p.stem)
def test_honest_code_beside_what_the_hostile_candidates_attack_builds(path: Path, builds: Builds) -> None:
    # Struct-typed __device__ and __constant__ variables (registered by nvcc's constructor), template kernels
    # with struct parameters (their launch stubs are named there), <iostream>'s initialiser, a named .text
    # section, the toolkit's header libraries and their own host asm.
    text = path.read_text()
    source = with_parts(text) if "launch_swish" in text and "void swish(" not in text else text
    built = build_candidate(source, builds.header, builds.root / f"honest-{path.stem}", arch=ARCH,
                            allow=frozenset(), cache_dir=builds.root / "cache", sandbox=builds.sandbox)
    assert built.stage == "ok", [v.message for v in built.violations] or built.log


@pytest.mark.parametrize("case", [c for c in HOSTILE_CASES if c.refused_by], ids=lambda c: c.name)
def test_every_refusal_is_one_line_naming_what_to_change(case: HostileCase, builds: Builds) -> None:
    for violation in builds.of(case).violations:
        assert "\n" not in violation.message and len(violation.message) < 400, violation.message
        assert violation.line is not None or violation.text in violation.message, violation


def test_each_unlisted_glibc_function_is_named_in_its_own_refusal(builds: Builds) -> None:
    [case] = [c for c in HOSTILE_CASES if c.name == "unlisted_glibc"]
    named = {v.text for v in builds.of(case).violations if v.rule == "unlisted_import"}
    assert named == {"setmntent", "glob", "wordexp"}


@pytest.mark.parametrize("case", BUILT_CASES, ids=lambda c: c.name)
def test_a_hostile_driver_built_without_the_rules_is_contained_when_it_loads(
        case: HostileCase, builds: Builds, sandbox: Sandbox, tripwires: Tripwires) -> None:
    built = builds.of(case, rules=False)
    assert built.program is not None, built.log
    session = DriverSession(built.program.command(filtered=True), sandbox=sandbox, view=built.program.view())
    outcome = "starts"
    try:
        with session:
            pass
    except DriverForged as error:
        outcome = "forged"
        collected = [str(error)]
    except DriverCrashed as error:
        outcome = "blocked" if error.blocked else f"crashed: {error}"
        blocked = error.blocked
        collected = [str(error)]
    else:
        collected, blocked = [], []
    assert outcome == case.at_load, session.stderr_tail()
    if case.at_load == "blocked":
        assert [what.split()[0] for what in blocked] == [case.blocked_call]
    tripwires.assert_untouched([*collected, session.stderr_tail()], [built.source_path.parent])


@pytest.mark.parametrize("case", [c for c in HOSTILE_CASES if c.probe], ids=lambda c: c.name)
def test_a_candidates_definitions_of_the_drivers_own_calls_never_reach_the_driver(case: HostileCase,
                                                                                 builds: Builds,
                                                                                 sandbox: Sandbox) -> None:
    built = builds.of(case)
    assert built.program is not None, built.log
    launch = prepare(built.program.command(filtered=True), built.program.view(), sandbox)
    finished = subprocess.run(launch.argv, env=launch.env, input="".join(line + "\n" for line in case.probe),
                              capture_output=True, text=True, timeout=60, check=False)
    replies = [json.loads(line) for line in finished.stdout.splitlines()]
    assert [(reply["seq"], reply["ok"]) for reply in replies] == [(0, True), (1, False), (2, True)], finished.stdout
    assert "unknown cmd 'dance'" in replies[1]["error"] and "hijacked" not in finished.stdout


def test_an_oversized_object_is_deleted_and_never_enters_the_compile_cache(builds: Builds) -> None:
    built = builds.of(next(case for case in HOSTILE_CASES if case.name == "huge_object_array"))
    assert [v.rule for v in built.violations] == ["object_size"]
    assert not (built.source_path.parent / "candidate.o").exists()
    assert built.program is None and built.link is None
    cached = [path for path in (builds.root / "cache").iterdir() if path.is_file()]
    assert all(path.stat().st_size <= MAX_OBJECT_BYTES for path in cached)


def loaded(builds: Builds, sandbox: Sandbox, name: str) -> DriverSession:
    """The named case's driver, built without the rules, after it loaded in the sandbox and was closed."""
    built = builds.of(next(case for case in HOSTILE_CASES if case.name == name), rules=False)
    assert built.program is not None, built.log
    session = DriverSession(built.program.command(filtered=True), sandbox=sandbox, view=built.program.view())
    with session:
        pass
    return session


def loaded_report(builds: Builds, sandbox: Sandbox, name: str) -> str:
    """What the named case's driver, built without the rules, wrote to stderr when it loaded in the sandbox."""
    return loaded(builds, sandbox, name).stderr_tail()


def test_a_driver_fills_no_more_of_the_hosts_memory_through_dev_than_its_shm_size(builds: Builds,
                                                                                  sandbox: Sandbox) -> None:
    report = loaded_report(builds, sandbox, "fill_dev_tmpfs")
    filled = {m["path"]: int(m["mib"]) for m in re.finditer(r"HOSTILE filled (?P<path>\S+) with MiB (?P<mib>\d+)",
                                                            report)}
    assert not [path for path in filled if not path.startswith("/dev/shm/")], report
    assert sum(filled.values()) <= SHM_BYTES >> 20, report
    assert report.count("HOSTILE could not create /dev/kb-fill") == 2, report


@pytest.mark.xfail(bool(NO_HOST_BOUND), strict=True, reason=f"open on this machine: memfd and System V shared "
                   f"memory are counted by no limit but a memory cgroup, and {NO_HOST_BOUND}")
def test_a_driver_that_fills_unmapped_shared_memory_past_its_bound_is_killed(builds: Builds,
                                                                           sandbox: Sandbox) -> None:
    bound_mib = 768  # the case takes 1.5 GiB: 2 memfd files of 512 MiB, then a System V segment of 512 MiB
    with pytest.raises(DriverCrashed) as crashed:
        loaded(builds, replace(sandbox, memory_bytes=bound_mib << 20), "fill_host_memory_memfd")
    # bwrap reports its child's death by SIGKILL (the cgroup's OOM kill) as status 128 + 9
    assert crashed.value.exit_status == 128 + signal.SIGKILL, crashed.value
    assert "killed at the sandbox's host-memory bound of 0.8 GiB" in str(crashed.value)


@pytest.mark.xfail(os.getuid() == 0 and bool(NO_HOST_BOUND), strict=True, reason="open where the harness "
                   "runs as root without a pids cgroup: the kernel applies no RLIMIT_NPROC to uid 0")
def test_a_driver_starts_no_more_threads_than_its_task_limit(builds: Builds, sandbox: Sandbox) -> None:
    report = loaded_report(builds, sandbox, "thread_flood")
    started = re.search(r"HOSTILE started threads (\d+)", report)
    assert started is not None, report
    assert int(started[1]) < DRIVER_LIMITS.tasks


def _preprocessed(source: Path, flags: list[str]) -> str:
    """What nvcc's host pass makes of `source` with `flags`, without line markers (they name no flag)."""
    done = subprocess.run(["nvcc", "-E", *flags, source.name], cwd=source.parent, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    return "\n".join(line for line in done.stdout.splitlines() if line.strip() and not line.startswith("#"))


def torch_extension_nvcc_flags(extra_cuda_cflags: list[str]) -> list[str]:
    """The flags torch.utils.cpp_extension gives nvcc for a .cu source (torch 2.x, Linux), less include folders:
    the extension's defines, its common nvcc flags, -fPIC, the caller's flags, and C++20 where none names a
    standard."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    flags = ["-DTORCH_EXTENSION_NAME=kb_exported", "-DTORCH_API_INCLUDE_EXTENSION_H", *COMMON_NVCC_FLAGS,
             "--compiler-options", "-fPIC", *extra_cuda_cflags]
    return flags if any(flag.startswith("-std=") for flag in flags) else [*flags, "-std=c++20"]


def test_an_exported_kernel_is_preprocessed_as_the_harness_compiled_it(builds: Builds, tmp_path: Path) -> None:
    from kernelblaster.harness.export.exporter import prepare_export
    from kernelblaster.tools.nvcc import compile_flags

    case = next(case for case in HOSTILE_CASES if case.name == "export_build_divergence")
    source = tmp_path / "candidate.cu"
    source.write_text(case.candidate_source())
    (tmp_path / "kb_problem.h").write_text(builds.header)
    exported = prepare_export(SWISH, source, arch=ARCH, precision="strict").nvcc_flags
    include = [f"-I{DRIVER_DIR}"]
    harness = _preprocessed(source, [*include, *(flag for flag in compile_flags(ARCH) if flag != "-c")])
    assert "if (0)" in harness
    assert _preprocessed(source, [*include, *torch_extension_nvcc_flags(exported)]) == harness


# ---------------------------------------------------------------------------------------------------
# The compile sandbox, behind the source rules
# ---------------------------------------------------------------------------------------------------
COMPILE_TIME_READS = {
    "incbin": ('__asm__(".pushsection .rodata\\n.incbin \\"/etc/passwd\\"\\n.popsection");', "/etc/passwd"),
    "include": ('#include "/etc/hostname"', "/etc/hostname"),
    "stdin": ('#include "/dev/stdin"', "/dev/stdin"),
    "macro": ('#define HOST_FILE "/etc/hostname"\n#include HOST_FILE', "/etc/hostname"),
    "relative": ('#include "../../../../../../../../etc/passwd"', "../../../../../../../../etc/passwd"),
}


@pytest.mark.parametrize("attack", COMPILE_TIME_READS, ids=str)
def test_the_compile_sandbox_keeps_host_files_out_and_names_them(attack: str, tmp_path: Path,
                                                                 sandbox: Sandbox) -> None:
    line, path = COMPILE_TIME_READS[attack]
    (tmp_path / "candidate.cu").write_text(f'{line}\nextern "C" int kb_forward() {{ return 0; }}\n')
    compiled = compile_object(tmp_path / "candidate.cu", tmp_path / "candidate.o", arch=ARCH,
                              include_dirs=[tmp_path, DRIVER_DIR], cache_dir=None, sandbox=sandbox, timeout_s=120)
    assert not compiled.ok and not compiled.timed_out, compiled.log
    assert [v.text for v in files_read_outside(compiled, tmp_path)] == [path]
    host_file = Path(os.path.normpath(tmp_path / path))
    if host_file.is_file() and host_file.read_text().strip():
        assert host_file.read_text().splitlines()[0] not in compiled.log


# ---------------------------------------------------------------------------------------------------
# nvcc dies with the harness
# ---------------------------------------------------------------------------------------------------
HARNESS = """
import sys
from pathlib import Path
from kernelblaster.tools.nvcc import compile_object
from kernelblaster.tools.sandbox import require_sandbox
source = Path(sys.argv[1])
compile_object(source, source.with_suffix(".o"), arch="sm_90", include_dirs=[], cache_dir=None,
               sandbox=require_sandbox(False))
"""


def slow_source(statements: int = 30000) -> str:
    """A kernel of `statements` dependent lines: nvcc's children work on it for tens of seconds."""
    body = [f"  v = v * {1 + i * 1e-7:.9f}f + w; w = w * {1 - i * 1e-7:.9f}f - v;" for i in range(statements)]
    return "\n".join(["__global__ void slow(float* out) {", "  float v = out[0], w = out[1];", *body,
                      "  out[0] = v + w;", "}", ""])


def processes_naming(marker: str) -> list[int]:
    """Live processes whose command line mentions `marker` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            named = entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes()
            if named and (entry / "stat").read_text().split(") ", 1)[1][0] != "Z":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_killed_harness_takes_its_sandboxed_nvcc_and_its_children_with_it(tmp_path: Path) -> None:
    marker = f"slow_{uuid.uuid4().hex}"  # in the command line of nvcc and of every tool it starts
    source = tmp_path / f"{marker}.cu"
    source.write_text(slow_source())
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, str(source)])
    deadline = time.monotonic() + 120
    while len(processes_naming(marker)) < 4 and time.monotonic() < deadline:  # bwrap, nvcc and a child or two
        assert harness.poll() is None, "the compile ended before the harness could be killed"
        time.sleep(0.2)
    started = processes_naming(marker)
    os.kill(harness.pid, signal.SIGKILL)
    harness.wait()
    deadline = time.monotonic() + 10
    while processes_naming(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(started) >= 4 and processes_naming(marker) == []
