"""Measure the prompt of every agent role, in tokens with the share of each section, for a level-1, a
level-2 and a level-3 KernelBench problem, on CPU.

Run: `python benchmarks/prompt_sizes.py [KERNELBENCH] [--level1 FILE] [--level2 FILE] [--level3 FILE]
[--problem LEVEL/FILE ...] [--gpu-facts FILE] [--write-prompts DIR]`. KERNELBENCH defaults to
../shared/kernelbench relative to the repository; `--problem` (repeatable: a path under KERNELBENCH such as
level1/23_Softmax.py, or any problem file) renders those problems instead of the three defaults.

Each problem goes through the real graph (one iteration, one trajectory of two steps, a fresh KB from the
seed) with `--llm human`: every prompt is rendered from the templates exactly as a person (or, with the
answer form added, a model) would be shown it, and answered here with a fixed answer of realistic length.
The GPU is replaced by `CpuStandIn`, a stand-in named as such: the header, the compulsory bytes and FLOPs
and the roofline floor are the real ones of the problem (the problem analysed on PyTorch's meta device);
PyTorch's times are KernelBench's published H100 times; every kernel's profile, and PyTorch's, is a real
ncu recording of two kernels that is not the problem's (tests/fixtures/ncu/details_rules.csv); the GPU facts
are an H100 SXM's datasheet figures (or a run's `baseline/facts.json` with --gpu-facts); the CUDA answers
are the problem's starting-point snippet (else the vectorized-tail snippet) with kb_forward glue.

Tokens are counted with tiktoken's cl100k_base (the estimate of `kb.tokens` if it cannot be loaded). A
role's system part includes the answer form of the lowering roles (they answer in plain text); schema
roles also send their JSON schema as a tool, which is not counted. Printed: per role the first prompt's
tokens and each section's share, then every shown prompt against its role's budget (`ROLE_BUDGETS`); the
exit status is 1 when one is over. A written prompt opens with a line saying it is a CPU rendering.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, Unpack

from kernelblaster.graph.app import api
from kernelblaster.graph.core.context import RunContext
from kernelblaster.graph.core.services import Services
from kernelblaster.graph.core.state import RunFacts
from kernelblaster.graph.llm.human import HumanQuestion
from kernelblaster.harness.analysis import analyse_problem
from kernelblaster.harness.evaluate import EvalOptions
from kernelblaster.harness.gpu_facts import GpuFacts, capability_facts, compiler_facts, instruction_facts
from kernelblaster.harness.header import generate_header
from kernelblaster.harness.precision_facts import PrecisionFacts, measure_precision_facts, not_measured
from kernelblaster.harness.problem import Problem
from kernelblaster.harness.profile.outcome import ProfileOutcome, build_profile_report
from kernelblaster.harness.result import (
    BaselineTiming,
    CandidateTiming,
    CheckResult,
    EvalResult,
    Roofline,
    Speedup,
)
from kernelblaster.harness.roofline import GpuPeaks, roofline_check, roofline_for
from kernelblaster.harness.stats import TimingStats
from kernelblaster.kb.operations import OperationKind
from kernelblaster.kb.snippets import load_snippet, starting_points_for
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.kb.tokens import default_token_counter
from kernelblaster.nodes.kernels import CudaAnswer
from kernelblaster.tools.sanitizer import SanitizerResult

REPO = Path(__file__).resolve().parents[1]
RECORDED_NCU = REPO / "tests" / "fixtures" / "ncu" / "details_rules.csv"
DEFAULT_PROBLEMS = {"level1": "1_Square_matrix_multiplication_.py", "level2": "12_Gemm_Multiply_LeakyReLU.py",
                    "level3": "1_MLP.py"}
# Tokens each role's prompt may take (system part with the answer form, and the prompt), by role/node. The
# first kernel's may take as much as a step's: a GEMM's under strict shows two verified kernels to build on,
# FFMA and 3xTF32 (about 1,000 and 1,800 tokens), and the first kernel decides most of where the search goes.
ROLE_BUDGETS: dict[str, int] = {
    "lowering/write_initial": 7500, "lowering/lower": 7500, "lowering/lower_unguided": 7500,
    "soft_verifier/check_initial": 4000, "soft_verifier/verify": 4000, "state_extractor/extract_state": 3000,
    "state_matcher/match_state": 1500, "policy_evaluation/policy_evaluation": 1500,
    "perf_gap_analysis/perf_gap_analysis": 1500, "parameter_update/parameter_update": 2500,
}
PRECISION_ON_CPU = (" Where the problem has matrix products, the precision facts were measured by the harness's "
                    "own code on this machine's CPU, at the problem's size, as the harness measures them on the GPU.")
RENDERED_ON_CPU = ("<!-- Rendered on CPU by benchmarks/prompt_sizes.py: the GPU, PyTorch's times and kernels and "
                   "every profile are a stand-in's figures (see that script's docstring), not measurements. -->\n\n")
# The stand-in's kernels: the initial one at twice PyTorch's best time, each step 20% faster.
INITIAL_VS_BASELINE = 2.0
STEP_FACTOR = 0.8
MAX_PROMPTS = 30
_SECTION = re.compile(r"^## ", re.MULTILINE)
_OFFERED = re.compile(r"Offered optimizations, in order: ([a-z0-9_.-]+)")
_FIRST_STATE = re.compile(r"^- ([a-z0-9_.-]+) \(", re.MULTILINE)

# NVIDIA H100 SXM5 80GB datasheet and Hopper whitepaper figures (dense tensor-core throughput).
H100_DATASHEET = GpuFacts(
    source="datasheet", name="NVIDIA H100 80GB HBM3", arch="sm_90", sm_count=132, max_threads_per_sm=2048,
    shared_memory_per_sm=228 << 10, shared_memory_per_block=48 << 10, shared_memory_per_block_optin=227 << 10,
    registers_per_sm=65536, l2_cache=50 << 20, memory=80 << 30, bandwidth_gbs=3350.0, fp32_tflops=66.9,
    tf32_tflops=494.7, fp16_tflops=989.4, compiler=compiler_facts("sm_90"),
    instructions=instruction_facts("sm_90", "strict"), capabilities=capability_facts("sm_90"),
)
GLUE = """
// kb_forward glue (prompt-size benchmark stand-in): launch the kernel above on the problem's tensors.
extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs,
                          cudaStream_t stream) {
    (void)params;
    const float* a = static_cast<const float*>(inputs[0].data);
    float* out = static_cast<float*>(outputs[0].data);
    const int64_t n = outputs[0].shape[0];
    launch_stand_in(a, out, n, stream);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
"""


class MeasuredFields(TypedDict, total=False):
    """What a measured result adds to the fields every result has."""

    timing: CandidateTiming
    baseline: BaselineTiming
    speedup: Speedup
    roofline: Roofline
    profile: ProfileOutcome | None


@dataclass(frozen=True)
class StandInBuild:
    label: str
    ok: bool = True
    result: EvalResult | None = None

    @property
    def steps_taken(self) -> int:
        """0 for the initial kernel, n + 1 for a kernel written in step n (labels such as i0-t0-s1-a0)."""
        found = re.search(r"-s(\d+)-", self.label)
        return int(found[1]) + 1 if found else 0


class CpuStandIn:
    """Replaces the GPU harness for rendering prompts on CPU (see the module docstring); measures nothing."""

    def __init__(self, problem: Problem, options: EvalOptions, gpu: GpuFacts, baseline_ms: tuple[float, float],
                 measure_precision: bool = False) -> None:
        self.problem, self.options, self.gpu = problem, options, gpu
        self.measure_precision = measure_precision
        analysis = analyse_problem(problem, None)
        self.header = generate_header(analysis.spec)
        peaks = GpuPeaks(gpu_name=gpu.name, bandwidth_gbs=gpu.bandwidth_gbs, fp32_tflops=gpu.fp32_tflops,
                         tf32_tflops=gpu.tf32_tflops, fp16_tflops=gpu.fp16_tflops, measured_at=gpu.source)
        self.roofline = roofline_for(analysis.spec, analysis.footprint.flops, peaks, options.precision)
        self.flops = analysis.footprint.flops
        self.operations = None if analysis.operations is None else sorted(analysis.operations)
        eager, compiled = baseline_ms
        self.timing = BaselineTiming(eager=_stats(eager), compiled=_stats(compiled), precision=options.precision,
                                     rotating_sets=2)
        self.profile = build_profile_report(RECORDED_NCU.read_text())

    def build(self, source: str, label: str) -> StandInBuild:
        return StandInBuild(label)

    def verify(self, built: StandInBuild) -> EvalResult:
        return self._result("verified", [CheckResult(name="correct", passed=True, detail="ok")])

    def diagnose(self, built: StandInBuild) -> SanitizerResult | None:
        return None  # nothing crashes here

    def measure(self, built: StandInBuild, verified: EvalResult, profile: bool) -> EvalResult:
        time_ms = self.timing.best_ms * INITIAL_VS_BASELINE * STEP_FACTOR ** built.steps_taken
        roofline, floor_check = roofline_check(self.roofline, time_ms)
        timing = CandidateTiming(event=_stats(time_ms), rotating_sets=2, l2_flush=True, calls=40,
                                 incomplete_calls=0, policy_windows=0)
        return self._result("measured", [*verified.checks, floor_check], timing=timing, baseline=self.timing,
                            speedup=Speedup.of(time_ms, self.timing), roofline=roofline,
                            profile=self.profile if profile else None)

    def baseline(self, remeasure: bool = False) -> BaselineTiming:
        return self.timing

    def profile_baseline(self) -> ProfileOutcome:
        return self.profile

    def gpu_facts(self) -> GpuFacts:
        return self.gpu.model_copy(update={"instructions": instruction_facts(self.gpu.arch, self.options.precision)})

    def roofline_floor(self) -> Roofline:
        return self.roofline

    def precision_facts(self) -> PrecisionFacts:
        if self.flops == 0:
            return not_measured(self.options.precision, "the forward pass has no matrix products or convolutions",
                                products=False)
        if self.measure_precision:
            return measure_precision_facts(self.problem, "cpu", self.options.precision, counted_flops=self.flops)
        return not_measured(self.options.precision, "rendered on CPU by a stand-in, which measures nothing")

    def operation_kinds(self) -> list[OperationKind] | None:
        return self.operations

    def close(self) -> None:
        pass

    def _result(self, summary: str, checks: list[CheckResult], **fields: Unpack[MeasuredFields]) -> EvalResult:
        return EvalResult(verdict="ok", summary=summary, problem=str(self.problem.path),
                          problem_sha256=self.problem.sha256, candidate="candidate.cu", source_sha256="0" * 64,
                          gpu=self.gpu.name, arch=self.gpu.arch, precision=self.options.precision, compiled=True,
                          checks=checks, **fields)


@dataclass
class StandIns:
    """The evaluator factory `Services` is given: one `CpuStandIn` per problem."""

    gpu: GpuFacts
    baseline_ms: tuple[float, float]
    measure_precision: bool = False

    def __call__(self, problem: Problem, options: EvalOptions) -> CpuStandIn:
        return CpuStandIn(problem, options, self.gpu, self.baseline_ms, self.measure_precision)

    def missing(self, context: object) -> list[str]:
        return []


def _stats(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, p25_ms=ms, p75_ms=ms, min_ms=ms, max_ms=ms, mean_ms=ms, cv=0.0, samples=100)


def stand_in_kernel(pytorch_source: str) -> str:
    starts = starting_points_for(pytorch_source, "strict")
    snippet = starts[0].snippet if starts else load_snippet("vectorized_tail")
    return f'#include "kb_problem.h"\n{snippet.source}{GLUE}'


def answer_for(question: HumanQuestion, current: list[str]) -> str:
    """A fixed answer of realistic length for each role; a lowering answer changes the current kernel."""
    if question.role == "lowering":
        offered = _OFFERED.search(question.prompt)
        technique = offered.group(1) if offered else None
        current[0] = current[0] + f"// step applying {technique}\n" if offered else current[0]
        return CudaAnswer(technique=technique, cuda_source=current[0],
                          explanation="Loads four floats per thread with a scalar tail, halving the load "
                                      "instructions the profile shows as the long-scoreboard stall.",
                          choice_reason="The profile is dominated by long-scoreboard stalls on global loads, "
                                        "which this optimization addresses directly.").model_dump_json()
    if question.role == "state_matcher":
        nearest = _FIRST_STATE.search(question.prompt)
        return json.dumps({"state_id": nearest.group(1) if nearest else None, "reason": "the nearest state"})
    return json.dumps(FIXED_ANSWERS[question.role])


FIXED_ANSWERS: dict[str, object] = {
    "soft_verifier": {"faithful": True},
    "state_extractor": {
        "name": "latency-bound streaming", "primary_bottleneck": "long-scoreboard stalls on global loads",
        "secondary": ["69.8% achieved occupancy", "partial last wave"],
        "description": "Warps wait 49.4 of 61.4 cycles per instruction on L1TEX loads while DRAM runs at 48%: "
                       "too few loads are in flight to cover memory latency.",
    },
    "policy_evaluation": {"summary": "The first step beat its prediction (1.25x against 1.15x expected); the "
                                     "second matched it within noise.", "discrepancies": []},
    "perf_gap_analysis": {"analysis": "Both steps reduced long-scoreboard stalls; the remaining gap to the "
                                      "roofline is the partial last wave.",
                          "wrong_assumptions": [], "lessons": ["vector loads pay off before any tiling here"]},
    "parameter_update": {"edits": [], "rationale": "two measurements are not enough to change the priors"},
}


@dataclass(frozen=True)
class RenderedPrompt:
    role: str
    node: str
    text: str  # as a model reads it: the system part, then the prompt
    sections: dict[str, int]  # tokens per section, in prompt order

    @property
    def tokens(self) -> int:
        return sum(self.sections.values())


def render_problem(problem: Path, gpu: GpuFacts, baseline_ms: tuple[float, float],
                   measure_precision: bool = False) -> list[RenderedPrompt]:
    """Every prompt of a two-step run of `problem`, in the order asked (with `measure_precision`, the precision
    facts measured on the CPU at the problem's size, as the harness measures them on the GPU)."""
    count = default_token_counter().count
    with tempfile.TemporaryDirectory() as scratch:
        kb_path = Path(scratch) / "kb.json"
        KnowledgeBase.create(kb_path)
        context = RunContext(llm="human", iterations=1, trajectories=1, depth=2, kb_path=str(kb_path),
                             run_dir=str(Path(scratch) / "run"))
        services = Services(evaluators=StandIns(gpu, baseline_ms, measure_precision))
        outcome = api.optimize(problem, context, services=services)
        current = [stand_in_kernel(problem.read_text())]
        prompts: list[RenderedPrompt] = []
        while outcome.status == "waiting_for_answer" and len(prompts) < MAX_PROMPTS:
            question = outcome.questions[0].question
            system, sections = _sections(question, count)
            prompts.append(RenderedPrompt(question.role, question.node, f"{system}\n\n{question.prompt}", sections))
            outcome = api.answer(outcome.run_dir, answer_for(question, current), services=services)
        if outcome.status != "finished":
            raise SystemExit(f"{problem.name}: the run stopped ({outcome.status}) after {len(prompts)} prompts")
        return prompts


def _sections(question: HumanQuestion, count: Callable[[str], int]) -> tuple[str, dict[str, int]]:
    """The system part as the model reads it, and the tokens of each section of the whole prompt."""
    system = question.instructions + (f"\n\n{CudaAnswer.text_format()}" if question.role == "lowering" else "")
    sections = {"system (role, contract, answer form)": count(system)}
    starts = [match.start() for match in _SECTION.finditer(question.prompt)]
    if not starts or starts[0] > 0:
        starts.insert(0, 0)
    for begin, end in zip(starts, [*starts[1:], len(question.prompt)], strict=True):
        part = question.prompt[begin:end]
        title = part.splitlines()[0].removeprefix("## ").split(" (")[0][:40] if part.startswith("## ") else "(top)"
        sections[title] = sections.get(title, 0) + count(part)
    return system, sections


# PyTorch's times for a problem KernelBench publishes none for (a stand-in's, like the rest).
UNPUBLISHED_MS = (1.0, 1.0)


def published_baseline_ms(kernelbench: Path, level: str, problem: str) -> tuple[float, float]:
    """KernelBench's published H100 eager and torch.compile times of a problem, ms (`UNPUBLISHED_MS` for a
    problem it has none for)."""
    times = kernelbench / "baseline_times" / "H100_Modal"
    try:
        eager = json.loads((times / "baseline_time_torch.json").read_text())[level][problem]["mean"]
        compiled = json.loads((times / "baseline_time_torch_compile_inductor_default.json").read_text())
        return eager, compiled[level][problem]["mean"]
    except (OSError, KeyError):
        return UNPUBLISHED_MS


def shown_prompts(prompts: list[RenderedPrompt]) -> list[tuple[str, RenderedPrompt]]:
    """The first prompt of each role and node, and the second lowering prompt (the first with a history),
    each with its label."""
    seen: dict[str, int] = {}
    shown = []
    for prompt in prompts:
        name = f"{prompt.role}/{prompt.node}"
        seen[name] = seen.get(name, 0) + 1
        if seen[name] == 1 or (seen[name] == 2 and prompt.node == "lower"):
            shown.append((name if seen[name] == 1 else f"{name} (second step)", prompt))
    return shown


def print_prompts(level: str, problem: str, prompts: list[RenderedPrompt], write_to: Path | None,
                  precision_on_cpu: bool = False) -> list[str]:
    """Print (and write) the shown prompts; the lines of those over their role's budget."""
    print(f"\n{level}: {problem}")
    over = []
    for label, prompt in shown_prompts(prompts):
        if write_to is not None:
            write_to.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{level}-{Path(problem).stem}-{label}").strip("-")
            note = RENDERED_ON_CPU.replace(" -->", PRECISION_ON_CPU + " -->") if precision_on_cpu else RENDERED_ON_CPU
            (write_to / f"{name}.md").write_text(note + prompt.text)
        shares = ", ".join(f"{title} {100 * tokens / prompt.tokens:.0f}%" for title, tokens in prompt.sections.items())
        budget = budget_for(prompt)
        mark = "" if prompt.tokens <= budget else f"  OVER the {budget:,}-token budget"
        print(f"  {label:38s} {prompt.tokens:6,d} tokens (budget {budget:,}){mark}: {shares}")
        if mark:
            over.append(f"{level} {problem} {label}: {prompt.tokens:,} tokens, budget {budget:,}")
    return over


def budget_for(prompt: RenderedPrompt) -> int:
    key = f"{prompt.role}/{prompt.node}"
    if key not in ROLE_BUDGETS:
        raise SystemExit(f"no token budget for the prompt {key}: add it to ROLE_BUDGETS")
    return ROLE_BUDGETS[key]


def load_gpu_facts(path: Path | None) -> GpuFacts:
    if path is None:
        return H100_DATASHEET
    text = path.read_text()
    try:
        return RunFacts.model_validate_json(text).gpu
    except ValueError:
        return GpuFacts.model_validate_json(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernelbench", nargs="?", type=Path, default=REPO.parent / "shared" / "kernelbench")
    for level, name in DEFAULT_PROBLEMS.items():
        parser.add_argument(f"--{level}", default=name, help=f"problem file of {level} (default {name})")
    parser.add_argument("--gpu-facts", type=Path, help="a run's baseline/facts.json (or GpuFacts JSON) instead of "
                                                       "the H100 datasheet figures")
    parser.add_argument("--problem", action="append", default=[], metavar="LEVEL/FILE",
                        help="render this problem (under KERNELBENCH, or any path) instead of the defaults; repeatable")
    parser.add_argument("--write-prompts", type=Path, metavar="DIR", help="also write each prompt shown to DIR")
    parser.add_argument("--measure-precision", action="store_true",
                        help="measure the precision facts on the CPU at the problem's size (the harness measures "
                             "them on the GPU); without it the prompts say they were not measured")
    args = parser.parse_args(argv)
    gpu = load_gpu_facts(args.gpu_facts)
    counter = default_token_counter()
    print(f"Prompt sizes, rendered on CPU from the templates (tokens: {counter.name}; GPU facts: {gpu.source}, "
          f"{gpu.name})")
    chosen = ([_under(args.kernelbench, given) for given in args.problem] if args.problem
              else [args.kernelbench / level / getattr(args, level) for level in DEFAULT_PROBLEMS])
    over: list[str] = []
    for problem in chosen:
        if not problem.is_file():
            print(f"error: no problem {problem}", file=sys.stderr)
            return 2
        level = problem.parent.name
        prompts = render_problem(problem, gpu, published_baseline_ms(args.kernelbench, level, problem.name),
                                 args.measure_precision)
        over += print_prompts(level, problem.name, prompts, args.write_prompts, args.measure_precision)
    print("\nEvery prompt is within its role's budget." if not over
          else "\nOver budget:\n" + "\n".join(f"  {line}" for line in over))
    return 1 if over else 0


def _under(kernelbench: Path, given: str) -> Path:
    """`given` as a path, else under KERNELBENCH."""
    path = Path(given)
    return path if path.is_file() else kernelbench / given


if __name__ == "__main__":
    sys.exit(main())
