"""nodes/prompts/contract.txt: one candidate contract, shown by every CUDA-writing prompt, that says what the
harness enforces: the static and object rules (built here with the real nvcc, static check and object check),
the driver's poisoning and the buffers' alignment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from kernelblaster.harness.buffers import SharedBuffer
from kernelblaster.harness.build import build_candidate
from kernelblaster.harness.spec import TensorSpec
from kernelblaster.harness.static_check import check_source
from kernelblaster.nodes.prompting import CONTRACT_FILE, load_prompt, prompt_file
from kernelblaster.tools.sandbox import Sandbox
from kernelblaster.tools.symbols import FORBIDDEN_APIS, LIBRARIES

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "candidates"
HEADER = (FIXTURES / "kb_problem.h").read_text()
CONTRACT = " ".join(prompt_file(CONTRACT_FILE).split())
# Each family the static and object rules refuse, and the words the contract names it by.
NAMED_AS = {"file_io": "files", "process": "processes", "system_call": "system calls", "environment": "environment",
            "threads": "threads", "dynamic_loading": "dlopen", "ipc": "IPC", "profiler_control": "profiler",
            "device_control": "device control", "host_callbacks": "host callbacks",
            "managed_memory": "managed memory", "library_allocation": "a library's own allocator",
            "default_stream": "a changed default stream"}
KB_FORWARD = ('extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, '
              'cudaStream_t stream) { return 0; }\n')


@pytest.mark.parametrize("name", ["write_initial", "lower", "lower_unguided"])
def test_every_cuda_writing_prompt_shows_the_one_contract(name: str) -> None:
    system = " ".join(load_prompt(name).system.split())
    assert system.count(CONTRACT) == 1 and "${contract}" not in system


def test_the_contract_names_every_api_family_the_rules_refuse() -> None:
    assert {api.rule for api in FORBIDDEN_APIS} == set(NAMED_AS)
    for rule, words in NAMED_AS.items():
        assert words in CONTRACT, rule


def test_the_contract_names_linked_libraries_as_refused_unless_allowed_and_the_rules_agree() -> None:
    assert "cuBLAS, cuDNN ..." in CONTRACT and "CUTLASS/CuTe unless listed as allowed" in CONTRACT
    for library in LIBRARIES:
        violations = check_source(f"#include <{library.header}>\n{KB_FORWARD}")
        assert [v.rule for v in violations] == [f"library:{library.name}"]
        assert check_source(f"#include <{library.header}>\n{KB_FORWARD}", frozenset({library.name})) == []


def test_the_header_only_parts_the_contract_allows_pass_the_source_rules() -> None:
    source = (FIXTURES / "header_only_toolkit.cu").read_text()
    assert check_source(source) == []
    for header in ("cub/block/", "cooperative groups", "cuda::pipeline", "cuda/barrier", "cuda::std",
                   "static __device__ arrays"):
        assert header in CONTRACT


def test_a_candidate_using_the_allowed_header_only_parts_and_static_scratch_builds(tmp_path: Path,
                                                                                    sandbox: Sandbox) -> None:
    built = build_candidate((FIXTURES / "header_only_toolkit.cu").read_text(), HEADER, tmp_path / "build",
                            arch="sm_90", allow=frozenset(), cache_dir=tmp_path / "cache", sandbox=sandbox)
    assert (built.stage, built.violations) == ("ok", [])


def test_cub_device_algorithms_are_refused_by_the_object_check_as_the_contract_says(tmp_path: Path,
                                                                                     sandbox: Sandbox) -> None:
    source = ('#include "kb_problem.h"\n#include <cub/device/device_reduce.cuh>\n'
              'extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, '
              'cudaStream_t stream) {\n  size_t bytes = 0;\n'
              '  cub::DeviceReduce::Sum(nullptr, bytes, static_cast<const float*>(inputs[0].data),\n'
              '                         static_cast<float*>(outputs[0].data), KB_X_NUMEL, stream);\n'
              '  return 0;\n}\n')
    assert check_source(source) == []  # the source rules let it through: the object check does not
    built = build_candidate(source, HEADER, tmp_path / "build", arch="sm_90", allow=frozenset(),
                            cache_dir=tmp_path / "cache", sandbox=sandbox)
    assert built.stage == "static_violation"
    assert "dynamic_loading" in {v.rule for v in built.violations}
    assert "CUB's device-wide algorithms, cub/cub.cuh and Thrust" in CONTRACT


def test_new_workspace_and_outputs_are_poisoned_by_the_driver_as_the_contract_says() -> None:
    driver = (REPO / "harness" / "driver" / "kb_driver.cu").read_text()
    workspace = (REPO / "harness" / "driver" / "kb_workspace.cu").read_text()  # linked into the candidate
    assert "constexpr int kPoisonByte = 0xFF;" in driver and "constexpr int kPoisonByte = 0xFF;" in workspace
    for wrapped in ("cudaMalloc", "cudaMallocAsync", "cudaMallocFromPoolAsync", "cudaMallocPitch", "cudaMallocHost",
                    "cudaHostAlloc"):
        assert f"__wrap_{wrapped}(" in workspace
    assert "cudaMemsetAsync(out.data, kPoisonByte" in driver
    assert "Workspace and outputs are poisoned before calls: never rely on their contents." in CONTRACT


def test_every_tensor_reaches_the_candidate_at_the_start_of_its_own_allocation() -> None:
    # cuMemAlloc returns 256-byte aligned memory; the driver adds the IPC tensor's offset, which must be 0.
    spec = TensorSpec(name="x", origin="test", dtype="float32", shape=[4], strides=[1])
    buffer = SharedBuffer(spec, pointer=0x7F0000000000, nbytes=16, raw=torch.zeros(16, dtype=torch.uint8),
                          tensor=torch.zeros(4), ipc_handle_hex="00" * 64)
    assert buffer.ipc().offset == 0
    assert "its own allocation, 256-byte aligned" in CONTRACT


def test_the_contract_says_timing_and_tolerance_as_the_driver_and_verifier_do() -> None:
    driver = (REPO / "harness" / "driver" / "kb_driver.cu").read_text()
    driver = driver[driver.index("static std::string handle_time("):]
    # The start event is recorded before kb_forward is called, the stop event after it returns.
    order = [driver.index(marker) for marker in ("cudaEventRecord(s.start, s.stream)", "int rc = call_candidate(",
                                                 "cudaEventRecord(s.stop, s.stream)")]
    assert order == sorted(order)
    assert re.search(r"host API calls inside kb_forward count while `stream` waits on them", CONTRACT)
    verify = (REPO / "harness" / "verify.py").read_text()
    assert "repeated calls agree within tolerance" in verify
    assert "not bitwise: any algorithm, summation order or atomics will do" in CONTRACT
