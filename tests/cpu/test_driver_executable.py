"""The real C++ test driver linked with fixture candidates, started by its launcher in the OS sandbox.

Without a GPU: the protocol's error handling, the stdout redirection, and a clean fatal exit when CUDA is
unusable. With a GPU (`pytest -m gpu`): IPC buffers, run, time, profile, crashes and workspace poisoning.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from kernelblaster.harness.build import (
    CANDIDATE_VERSION_SCRIPT,
    DRIVER_DIR,
    WORKSPACE_SOURCE,
    build_candidate,
    trusted_object,
)
from kernelblaster.tools.driver_process import DriverCrashed, DriverProgram, DriverSession, IpcTensor, TensorSet
from kernelblaster.tools.nvcc import compile_object, link_shared_library
from kernelblaster.tools.sandbox import Sandbox, prepare

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "candidates"
HEADER = (FIXTURES / "kb_problem.h").read_text()
KB_FLOAT32 = 0
N = 1024


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One compile cache for the test session, so the driver object is compiled once."""
    return tmp_path_factory.getbasetemp() / "kb_build_cache"


@pytest.fixture
def program(tmp_path: Path, build_cache: Path, sandbox: Sandbox, request: pytest.FixtureRequest) -> DriverProgram:
    """The fixture candidate named by the (indirect) parameter, built for this machine's GPU (or sm_90)."""
    name = request.param
    arch = "sm_{}{}".format(*torch.cuda.get_device_capability()) if torch.cuda.is_available() else "sm_90"
    source = (FIXTURES / f"{name}.cu").read_text()
    built = build_candidate(source, HEADER, tmp_path / name, arch=arch, allow=frozenset(), cache_dir=build_cache,
                            sandbox=sandbox)
    assert built.stage == "ok" and built.program is not None, built.log
    return built.program


def talk(program: DriverProgram, sandbox: Sandbox, *requests: str) -> subprocess.CompletedProcess[str]:
    """Send raw request lines to the driver in the sandbox, close stdin, and collect every reply."""
    launch = prepare(program.command(filtered=True), program.view(), sandbox)
    return subprocess.run(launch.argv, env=launch.env, input="".join(r + "\n" for r in requests),
                          capture_output=True, text=True, timeout=60)


def session(program: DriverProgram, sandbox: Sandbox) -> DriverSession:
    return DriverSession(program.command(filtered=True), sandbox=sandbox, view=program.view())


# ---------------------------------------------------------------------------------------------------
# Without a GPU
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("program", ["scale_ok"], indirect=True)
def test_a_batch_before_setup_is_refused_and_the_driver_keeps_serving(program: DriverProgram,
                                                                       sandbox: Sandbox) -> None:
    finished = talk(program, sandbox, '{"cmd":"batch","seq":1,"sets":[0]}', '{"cmd":"exit","seq":2}')
    replies = [json.loads(line) for line in finished.stdout.splitlines()]
    assert replies == [{"seq": 0, "ok": True}, {"seq": 1, "ok": False, "error": "send setup first"},
                       {"seq": 2, "ok": True}]


@pytest.mark.parametrize("program", ["scale_ok"], indirect=True)
def test_bad_requests_get_error_replies_and_the_driver_keeps_serving(program: DriverProgram, sandbox: Sandbox) -> None:
    finished = talk(program, sandbox, "not json", '{"cmd":"dance","seq":1}', '{"cmd":"run","set":0,"seq":2}', "",
                    '{"cmd":"exit","seq":3}')
    replies = [json.loads(line) for line in finished.stdout.splitlines()]
    assert replies == [
        {"seq": 0, "ok": True},
        {"ok": False, "error": "malformed JSON at byte 0: expected a value"},
        {"seq": 1, "ok": False, "error": "unknown cmd 'dance' (expected setup, run, batch, time, profile or exit)"},
        {"seq": 2, "ok": False, "error": "send setup first"},
        {"seq": 3, "ok": True},
    ]
    assert finished.returncode == 0


@pytest.mark.parametrize("program", ["scale_ok"], indirect=True)
def test_the_driver_announces_itself_and_exits_cleanly_at_end_of_input(program: DriverProgram,
                                                                      sandbox: Sandbox) -> None:
    finished = talk(program, sandbox)
    assert (finished.returncode, finished.stdout) == (0, '{"seq":0,"ok":true}\n')


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (through bwrap's own processes into the sandbox), from /proc."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    direct = [int(child) for child in children.read_text().split()] if children.exists() else []
    return [found for child in direct for found in (child, *_descendants(child))]


@pytest.mark.parametrize("program", ["scale_ok"], indirect=True)
def test_the_driver_is_the_oom_killers_first_choice_over_the_harness(program: DriverProgram,
                                                                     sandbox: Sandbox) -> None:
    with session(program, sandbox) as driver:
        assert driver.pid is not None
        launchers = [pid for pid in _descendants(driver.pid)
                     if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == str(program.launcher).encode()]
        scores = [Path(f"/proc/{pid}/oom_score_adj").read_text().strip() for pid in launchers]
    assert scores == ["1000"]
    assert Path("/proc/self/oom_score_adj").read_text().strip() != "1000"


def unchecked_program(name: str, workdir: Path, build_cache: Path, sandbox: Sandbox) -> DriverProgram:
    """A fixture candidate compiled and linked as the build links one, without the build's checks: what the
    launcher does with code the rules would refuse (they are the early warning, not the boundary)."""
    built = build_candidate((FIXTURES / "scale_ok.cu").read_text(), HEADER, workdir / "checked", arch="sm_90",
                            allow=frozenset(), cache_dir=build_cache, sandbox=sandbox)
    assert built.program is not None, built.log
    (workdir / name).mkdir()
    (workdir / name / "kb_problem.h").write_text(HEADER)
    (workdir / name / "candidate.cu").write_text((FIXTURES / f"{name}.cu").read_text())
    compiled = compile_object(workdir / name / "candidate.cu", workdir / name / "candidate.o", arch="sm_90",
                              include_dirs=[workdir / name, DRIVER_DIR], cache_dir=None, sandbox=sandbox)
    workspace = trusted_object(WORKSPACE_SOURCE, "sm_90", build_cache, sandbox).output
    assert compiled.output is not None and workspace is not None, compiled.log
    linked = link_shared_library([compiled.output, workspace, built.program.driver], workdir / name / "candidate.so",
                                 arch="sm_90", libraries=[], sandbox=sandbox, version_script=CANDIDATE_VERSION_SCRIPT,
                                 wrap_allocators=True)
    assert linked.output is not None, linked.log
    return built.program.model_copy(update={"library": linked.output})


def test_the_build_refuses_a_candidate_whose_global_objects_run_code_at_load(tmp_path: Path, build_cache: Path,
                                                                             sandbox: Sandbox) -> None:
    built = build_candidate((FIXTURES / "prints_at_load.cu").read_text(), HEADER, tmp_path, arch="sm_90",
                            allow=frozenset(), cache_dir=build_cache, sandbox=sandbox)
    assert built.stage == "static_violation" and built.program is None
    assert [v.rule for v in built.violations] == ["load_time_code"]
    assert "initialisation of a global object" in built.violations[0].message


def test_candidate_output_from_static_initialisers_never_reaches_the_protocol(tmp_path: Path, build_cache: Path,
                                                                               sandbox: Sandbox) -> None:
    program = unchecked_program("prints_at_load", tmp_path, build_cache, sandbox)
    finished = talk(program, sandbox, '{"cmd":"exit","seq":1}')
    assert finished.stdout == '{"seq":0,"ok":true}\n{"seq":1,"ok":true}\n'
    assert "printf at load" in finished.stderr and "cout at load" in finished.stderr


@pytest.mark.parametrize("program", ["scale_ok"], indirect=True)
def test_a_request_error_through_the_session_leaves_the_driver_running(program: DriverProgram,
                                                                       sandbox: Sandbox) -> None:
    with session(program, sandbox) as driver:
        with pytest.raises(DriverCrashed, match="send setup first") as raised:
            driver.run(0, timeout_s=30)
        assert raised.value.exit_status is None
    assert driver.exit_status == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour on a machine without a usable GPU")
@pytest.mark.parametrize("program", ["scale_ok"], indirect=True)
def test_without_a_usable_gpu_setup_reports_the_cuda_error_and_the_driver_exits_3(program: DriverProgram,
                                                                                   sandbox: Sandbox) -> None:
    tensor = IpcTensor(handle_hex="00" * 64, offset=0, dtype=KB_FLOAT32, shape=[N], strides=[1])
    with session(program, sandbox) as driver, pytest.raises(DriverCrashed) as raised:
        driver.setup([TensorSet(inputs=[tensor], params=[], outputs=[tensor])], flush_bytes=0)
    assert raised.value.error.startswith("cudaError")
    assert raised.value.error.endswith("(selecting the device)")
    assert raised.value.exit_status == 3


# ---------------------------------------------------------------------------------------------------
# With a GPU
# ---------------------------------------------------------------------------------------------------
def ipc_tensor(tensor: torch.Tensor) -> IpcTensor:
    """Describe a CUDA tensor by the IPC handle of its allocation and its byte offset in it."""
    from fixtures.cuda_ipc import ipc_handle_of

    handle_hex, offset = ipc_handle_of(tensor)
    return IpcTensor(
        handle_hex=handle_hex,
        offset=offset,
        dtype=KB_FLOAT32,
        shape=list(tensor.shape),
        strides=list(tensor.stride()),
    )


def one_set(x: torch.Tensor, y: torch.Tensor) -> list[TensorSet]:
    return [TensorSet(inputs=[ipc_tensor(x)], params=[], outputs=[ipc_tensor(y)])]


L2_FLUSH_BYTES = 100 << 20


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["scale_ok"], indirect=True)
def test_run_writes_the_candidate_result_into_the_shared_output(program: DriverProgram,
        sandbox: Sandbox) -> None:
    x = torch.randn(N, device="cuda")
    y = torch.full((N,), float("nan"), device="cuda")
    with session(program, sandbox) as driver:
        driver.setup(one_set(x, y), flush_bytes=L2_FLUSH_BYTES)
        driver.run(0, timeout_s=30)
    torch.cuda.synchronize()
    assert torch.equal(y, 2 * x)


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["scale_ok"], indirect=True)
def test_tensors_sharing_one_allocation_are_mapped_once_at_their_offsets(program: DriverProgram,
        sandbox: Sandbox) -> None:
    buffer = torch.zeros(2 * N, device="cuda")
    x, y = buffer[:N], buffer[N:]
    x.copy_(torch.randn(N, device="cuda"))
    assert ipc_tensor(x).handle_hex == ipc_tensor(y).handle_hex
    with session(program, sandbox) as driver:
        driver.setup(one_set(x, y), flush_bytes=0)
        driver.run(0, timeout_s=30)
    torch.cuda.synchronize()
    assert torch.equal(y, 2 * x)


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["scale_ok"], indirect=True)
def test_time_returns_a_sample_per_timed_call_and_finds_every_call_complete(program: DriverProgram,
        sandbox: Sandbox) -> None:
    x, y = torch.randn(N, device="cuda"), torch.empty(N, device="cuda")
    with session(program, sandbox) as driver:
        driver.setup(one_set(x, y), flush_bytes=L2_FLUSH_BYTES)
        timing = driver.time(sets=[0], warmup=3, iters=20, flush=True, timeout_s=60)
    assert len(timing.event_ms) == 20 and all(event > 0 for event in timing.event_ms)
    assert (timing.incomplete_calls, timing.policy_windows) == (0, 0)
    torch.cuda.synchronize()
    assert torch.equal(y, 2 * x)  # the last timed call's output, poisoned before it and written by it


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["scale_ok"], indirect=True)
def test_a_batch_calls_once_per_listed_set_into_each_sets_own_outputs(program: DriverProgram,
        sandbox: Sandbox) -> None:
    xs = [torch.randn(N, device="cuda") for _ in range(3)]
    ys = [torch.full((N,), float("nan"), device="cuda") for _ in range(3)]
    sets = [TensorSet(inputs=[ipc_tensor(x)], params=[], outputs=[ipc_tensor(y)]) for x, y in zip(xs, ys, strict=True)]
    with session(program, sandbox) as driver:
        driver.setup(sets, flush_bytes=0)
        driver.batch([2, 0, 1], timeout_s=30)
        driver.batch([], timeout_s=30)  # an empty batch only synchronises
    torch.cuda.synchronize()
    assert all(torch.equal(y, 2 * x) for x, y in zip(xs, ys, strict=True))


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["scale_ok"], indirect=True)
def test_profile_mode_completes_outside_a_profiler(program: DriverProgram,
        sandbox: Sandbox) -> None:
    x, y = torch.randn(N, device="cuda"), torch.empty(N, device="cuda")
    with session(program, sandbox) as driver:
        driver.setup(one_set(x, y), flush_bytes=0)
        driver.profile(0, warmup=2, timeout_s=60)
    torch.cuda.synchronize()
    assert torch.equal(y, 2 * x)


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["illegal_address"], indirect=True)
def test_an_illegal_address_is_reported_and_the_harness_gpu_stays_usable(program: DriverProgram,
        sandbox: Sandbox) -> None:
    x, y = torch.randn(N, device="cuda"), torch.empty(N, device="cuda")
    with session(program, sandbox) as driver, pytest.raises(DriverCrashed) as raised:
        driver.setup(one_set(x, y), flush_bytes=0)
        driver.run(0, timeout_s=30)
    assert raised.value.error.startswith("cudaErrorIllegalAddress")
    assert raised.value.error.endswith("(after kb_forward, set 0)")
    assert raised.value.exit_status == 3
    assert torch.equal(x * 2 / 2, x)


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["returns_error"], indirect=True)
def test_a_nonzero_return_is_reported_as_rc_and_the_driver_keeps_serving(program: DriverProgram,
        sandbox: Sandbox) -> None:
    x, y = torch.randn(N, device="cuda"), torch.empty(N, device="cuda")
    with session(program, sandbox) as driver:
        driver.setup(one_set(x, y), flush_bytes=0)
        for _ in range(2):
            with pytest.raises(DriverCrashed) as raised:
                driver.run(0, timeout_s=30)
            assert (raised.value.rc, raised.value.exit_status) == (7, None)


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["reads_fresh_workspace", "reads_fresh_pinned_memory"], indirect=True)
def test_fresh_workspace_reads_as_poison_under_run(program: DriverProgram,
        sandbox: Sandbox) -> None:
    x, y = torch.randn(N, device="cuda"), torch.zeros(N, device="cuda")
    with session(program, sandbox) as driver:
        driver.setup(one_set(x, y), flush_bytes=0)
        driver.run(0, timeout_s=30)
    torch.cuda.synchronize()
    assert bool((y.view(torch.int32) == -1).all())  # every byte 0xFF, a NaN for float32


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["reads_fresh_workspace"], indirect=True)
def test_fresh_workspace_reads_as_poison_under_profile_too_as_no_switch_turns_poisoning_off(
        program: DriverProgram, sandbox: Sandbox) -> None:
    x, y = torch.randn(N, device="cuda"), torch.zeros(N, device="cuda")
    with session(program, sandbox) as driver:
        driver.setup(one_set(x, y), flush_bytes=0)
        driver.profile(0, warmup=0, timeout_s=60)
    torch.cuda.synchronize()
    assert bool((y.view(torch.int32) == -1).all())  # every byte 0xFF, a NaN for float32


def _persisting_l2_supported() -> bool:
    """Persisting L2 lines (access-policy windows) exist from Ampere (compute capability 8.0) on."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8


@pytest.mark.gpu
@pytest.mark.skipif(not _persisting_l2_supported(), reason="needs a GPU with persisting L2 (sm_80 or later)")
def test_a_persisting_l2_window_is_cleared_and_earns_nothing_across_the_flush(tmp_path: Path, build_cache: Path,
                                                                                 sandbox: Sandbox) -> None:
    # 24 MiB of input read per call: from DRAM after a flush, from L2 if persisting lines survived it.
    x, y = torch.randn(6 << 20, device="cuda"), torch.empty(1024, device="cuda")
    arch = "sm_{}{}".format(*torch.cuda.get_device_capability())
    medians, windows = {}, {}
    for name, prefix in (("window", ""), ("honest", "#define KB_NO_WINDOW\n")):
        source = prefix + (FIXTURES / "persisting_l2_window.cu").read_text()
        built = build_candidate(source, HEADER, tmp_path / name, arch=arch, allow=frozenset(), cache_dir=build_cache,
                                sandbox=sandbox)
        assert built.program is not None, built.log
        with session(built.program, sandbox) as driver:
            driver.setup(one_set(x, y), flush_bytes=L2_FLUSH_BYTES)
            timing = driver.time(sets=[0], warmup=10, iters=200, flush=True, timeout_s=120)
        medians[name], windows[name] = sorted(timing.event_ms)[100], timing.policy_windows
    assert windows == {"window": 210, "honest": 0}
    assert medians["window"] >= 0.85 * medians["honest"], medians
