"""Candidate kernels shared by the initial-kernel and the trajectory nodes: the agent's CUDA answer, storing
it, turning a failed build, check, crash or hang into feedback for the next try (a crash explained by
compute-sanitizer's memcheck where it runs), and the LLM soft verification.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from string import Template
from typing import Any, Self

from pydantic import BaseModel, Field, field_validator

from kernelblaster.graph.core.run_files import RunFiles
from kernelblaster.graph.core.services import BuiltCandidate, Evaluator, RunResources
from kernelblaster.graph.core.state import Candidate, Feedback, KernelRef, RunFacts
from kernelblaster.graph.llm.agents import AgentFailed, AnswerFormatError
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.harness.result import NOT_THE_CANDIDATES, EvalResult
from kernelblaster.kb.schema import SLUG_PATTERN
from kernelblaster.nodes.briefing import arithmetic_line
from kernelblaster.nodes.prompting import load_prompt, prompt_file
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.sanitizer import SanitizerResult, render_sanitizer_report

# A compiler log longer than this keeps its head (the first error, which usually causes the rest) and its
# tail (the last errors and the summary), the head taking the larger share.
COMPILE_LOG_CHARS = 4000
COMPILE_LOG_HEAD_SHARE = 0.6
CHOICE_REASON_CHARS = 400
HARNESS_RETRIES = 1
_FENCED = re.compile(r"```[a-zA-Z+]*\n(.*?)```", re.DOTALL)
_TECHNIQUE_COMMENT = re.compile(r"^\s*//\s*technique:\s*([a-z0-9_.-]+)", re.IGNORECASE)
# `technique: NAME`, also as models decorate it (**technique:** `NAME`).
_TECHNIQUE_LINE = re.compile(r"^[\s*`_]*technique[\s*`_]*:[\s*`_]*([A-Za-z0-9][A-Za-z0-9_.-]*?)[\s*`_.]*$",
                             re.IGNORECASE)
# `why: REASON`, also decorated (**why:** ...).
_WHY_LINE = re.compile(r"^[\s*`_]*why[\s*`_]*:[\s*`_]*(.+?)\s*$", re.IGNORECASE)
_FENCE = "```"
# Tags of a C++ block: models often write cpp for CUDA; the block is still unambiguous.
_CODE_TAGS = frozenset({"cuda", "cu", "cpp", "c++"})
NO_TECHNIQUE = "none"
_TECHNIQUE_NAME = re.compile(SLUG_PATTERN)


class CudaAnswer(BaseModel):
    """A complete CUDA source written by the lowering agent, with what it changed."""

    technique: str | None = Field(default=None, description="The optimization applied: its name as offered, or "
                                     "your own short identifier when none was offered")
    explanation: str = Field(description="What the code does differently and why that should be faster")
    cuda_source: str = Field(description="The complete .cu file: includes kb_problem.h and defines kb_forward")
    choice_reason: str | None = Field(default=None, description="Why this optimization, of those offered, for "
                                                                "this code, in one sentence")

    @field_validator("technique")
    @classmethod
    def _technique_is_a_name(cls, technique: str | None) -> str | None:
        """The technique as the KB names techniques (the text form's `technique:` line is read the same way):
        in lower case, `none` for none; anything else is refused, as the KB, the report and the progress
        lines all take it for a name."""
        if technique is None:
            return None
        name = technique.strip().lower()
        if name == NO_TECHNIQUE:
            return None
        if _TECHNIQUE_NAME.match(name) is None:
            raise ValueError("the technique must be a name like vectorized_access: letters, digits, '_', '.' and "
                             "'-', at most 64 characters (or none)")
        return name

    @classmethod
    def text_format(cls) -> str:
        return prompt_file("answer_cuda.txt").strip()

    @classmethod
    def from_text(cls, text: str) -> Self:
        """A model's answer in the form of `text_format`: one `technique:` line, at most one `why:` line, one
        fenced code block holding the whole file, the rest being the explanation. Anything ambiguous is an
        `AnswerFormatError`."""
        outside, code = _split_code_block(text)
        techniques = [found.group(1) for line in outside if (found := _TECHNIQUE_LINE.match(line))]
        if len(techniques) != 1:
            raise AnswerFormatError("there must be exactly one `technique: NAME` line outside the code block, "
                                    f"found {len(techniques)}")
        reasons = [found.group(1) for line in outside if (found := _WHY_LINE.match(line))]
        if len(reasons) > 1:
            raise AnswerFormatError(f"there must be at most one `why:` line, found {len(reasons)}")
        explanation = "\n".join(line for line in outside
                                if not _TECHNIQUE_LINE.match(line) and not _WHY_LINE.match(line)).strip()
        technique = techniques[0].lower()
        return cls(technique=None if technique == NO_TECHNIQUE else technique, explanation=explanation,
                   cuda_source=code, choice_reason=reasons[0] if reasons else None)

    def to_text(self) -> str:
        source = self.cuda_source if self.cuda_source.endswith("\n") else self.cuda_source + "\n"
        why = f"why: {self.choice_reason}\n" if self.choice_reason else ""
        return f"technique: {self.technique or NO_TECHNIQUE}\n{why}{self.explanation}\n\n```cuda\n{source}```\n"

    @classmethod
    def from_plain_text(cls, text: str) -> Self:
        """A hand-written answer: the models' form (`text_format`, read as strictly) when it opens with a
        `technique:` line, else the code alone (fenced or not), its technique named in a `// technique:` line."""
        first_line = text.lstrip().partition("\n")[0]
        if _TECHNIQUE_LINE.match(first_line):
            return cls.from_text(text)
        fenced = _FENCED.search(text)
        source = fenced.group(1) if fenced else text
        named = _TECHNIQUE_COMMENT.match(source)
        return cls(technique=named.group(1).lower() if named else None, explanation="written by hand",
                   cuda_source=source)


def _split_code_block(text: str) -> tuple[list[str], str]:
    """The lines outside the one fenced code block, and the code inside it."""
    lines = text.splitlines()
    fences = [number for number, line in enumerate(lines) if line.strip().startswith(_FENCE)]
    if not fences:
        raise AnswerFormatError("there is no ```cuda code block: put the whole .cu file in one block opened "
                                "with ```cuda and closed with ```")
    if len(fences) == 1:
        raise AnswerFormatError("the ```cuda code block is not closed with ```")
    if len(fences) > 2:
        raise AnswerFormatError(f"there are {(len(fences) + 1) // 2} code blocks; give exactly one, holding the "
                                "whole .cu file")
    opening, closing = fences
    tag = lines[opening].strip().removeprefix(_FENCE).strip().lower()
    if tag not in _CODE_TAGS or lines[closing].strip() != _FENCE:
        raise AnswerFormatError(f"the code block must be opened with ```cuda (not {lines[opening].strip()!r}) "
                                "and closed with ``` alone on its line")
    return lines[:opening] + lines[closing + 1:], "\n".join(lines[opening + 1:closing]) + "\n"


def check_cuda(answer: CudaAnswer) -> str | None:
    if "kb_forward" not in answer.cuda_source:
        return "cuda_source must be the whole file and define extern \"C\" int kb_forward(...)"
    return None


def save_candidate(files: RunFiles, answer: CudaAnswer, label: str) -> Candidate:
    source, sha256 = files.save_source(answer.cuda_source)
    reason = answer.choice_reason.strip()[:CHOICE_REASON_CHARS] if answer.choice_reason else None
    return Candidate(label=label, source=source, sha256=sha256, technique=answer.technique,
                     explanation=answer.explanation.strip()[:1000], choice_reason=reason or None)


def compile_feedback(candidate: Candidate, result: EvalResult) -> Feedback:
    log = head_and_tail(result.compile_log.strip(), COMPILE_LOG_CHARS, COMPILE_LOG_HEAD_SHARE)
    message = result.summary + (f"\nCompiler output:\n{log}" if log else "")
    return Feedback(stage="compile", candidate_source=candidate.source, message=message)


def head_and_tail(text: str, budget: int, head_share: float) -> str:
    """`text` whole if it fits in `budget` characters, else its first and last lines within the budget (the
    head taking `head_share` of it), with a line saying how much was left out between them."""
    if len(text) <= budget:
        return text
    head = text[:int(budget * head_share)]
    tail = text[len(text) - (budget - len(head)):]
    head, tail = head[:head.rfind("\n") + 1 or len(head)], tail[tail.find("\n") + 1:]
    return f"{head}... ({len(text) - len(head) - len(tail)} characters left out) ...\n{tail}"


def verify_feedback(candidate: Candidate, result: EvalResult) -> Feedback:
    failed = result.failed_check
    message = f"check '{failed.name}' failed: {failed.detail}" if failed else result.summary
    return Feedback(stage="verify", candidate_source=candidate.source, message=message)


def run_failure_feedback(resources: RunResources, candidate: Candidate, result: EvalResult) -> Feedback:
    """What is known about a crash or a hang: the CUDA error or the request that got no reply (with the
    driver's last output, both in the summary), and for a crash memcheck's report of the same call."""
    if result.verdict == "timeout":
        timeout_s = f"{resources.context.kernel_timeout_s:g}"
        message = Template(prompt_file("hung.txt")).substitute(error=result.summary, timeout_s=timeout_s)
    else:
        report = diagnose_on_gpu(resources, candidate)
        message = Template(prompt_file("crashed.txt")).substitute(error=result.summary, diagnosis=_diagnosis(report))
    return Feedback(stage="run", candidate_source=candidate.source, message=message.strip())


def _diagnosis(report: SanitizerResult | None) -> str:
    if report is None:
        return "(compute-sanitizer is not installed here, so nothing says which access failed.)"
    if report.status == "errors":
        return f"compute-sanitizer's memcheck, run on the same call, reports:\n{render_sanitizer_report(report)}"
    return f"compute-sanitizer's memcheck, run on the same call, could not say where: {report.reason or 'no errors'}"


def diagnose_on_gpu(resources: RunResources, candidate: Candidate) -> SanitizerResult | None:
    """memcheck's report of a candidate that crashed, kept beside its results; None without compute-sanitizer."""
    files = resources.files
    built = resources.build(files.read(candidate.source), candidate.label)
    with resources.pool.acquire() as evaluator:
        report = evaluator.diagnose(built)
    if report is not None:
        files.save(files.result_path(candidate.label, "diagnose"), report)
    return report


_FAILED_HOW = {"compile": "did not compile", "verify": "compiled but failed verification",
               "run": "compiled but crashed or hung when run"}


def feedback_section(files: RunFiles, feedback: Feedback | None) -> str:
    """The retry part of a lowering prompt: the code that failed and why (empty on a first try)."""
    if feedback is None:
        return ""
    return Template(prompt_file("retry.txt")).substitute(
        failed_how=_FAILED_HOW[feedback.stage], message=feedback.message,
        source=files.read(feedback.candidate_source))


def measured_kernel(candidate: Candidate, result: EvalResult, result_path: str) -> KernelRef:
    assert result.time_ms is not None, "a measured result has a time"
    return KernelRef(label=candidate.label, source=candidate.source, sha256=candidate.sha256, result=result_path,
                     time_ms=result.time_ms, speedup=result.speedup.vs_best if result.speedup else None,
                     technique=candidate.technique)


def verify_on_gpu(resources: RunResources, built: BuiltCandidate) -> EvalResult:
    return _judged(resources, lambda evaluator: evaluator.verify(built))


def measure_on_gpu(resources: RunResources, built: BuiltCandidate, verified: EvalResult) -> EvalResult:
    return _judged(resources, lambda evaluator: evaluator.measure(built, verified, profile=resources.context.profile))


def not_judged(result: EvalResult) -> bool:
    """The harness could not judge the candidate (it failed, or the problem does not fit the GPU): the result
    says nothing about the kernel, so it is neither feedback for the agent nor evidence for the KB."""
    return result.verdict in NOT_THE_CANDIDATES


def _judged(resources: RunResources, stage: Callable[[Evaluator[Any]], EvalResult]) -> EvalResult:
    """Run a GPU stage, once more if the harness could not judge; without a GPU the run cannot go on."""
    for _ in range(1 + HARNESS_RETRIES):
        with resources.pool.acquire() as evaluator:
            result = stage(evaluator)
        if not not_judged(result):
            return result
    if result.verdict == "no_gpu":
        raise UserFacingError("no CUDA GPU is visible, so candidates cannot be run (resume the run on a GPU machine)")
    return result


def read_result(files: RunFiles, relative: str) -> EvalResult:
    return EvalResult.model_validate_json(files.read(relative))


class SoftVerdict(BaseModel):
    """The soft verifier's judgement of whether the CUDA still does all the PyTorch model does."""

    faithful: bool = Field(description="True if the CUDA computes everything the model computes, for any input")
    problems: list[str] = Field(default_factory=list, description="Each missing or shortcut part, one per item")


def soft_verify(resources: RunResources, candidate: Candidate, node: str,
                facts: RunFacts | None) -> tuple[Feedback | None, list[TokenUsage]]:
    """What the soft verifier finds missing, as feedback for the next try (None if nothing, if it could not
    answer, or if the run switched it off), and the tokens it cost. It is told which cheaper products pass the
    problem's bounds as measured (`facts`), as the lowering agent is."""
    if not resources.context.soft_verify:
        return None, []
    question = load_prompt("soft_verify").question(
        role="soft_verifier", node=node, key=f"{candidate.label}.soft_verify", schema=SoftVerdict,
        pytorch_source=resources.problem.source, header=resources.header,
        cuda_source=resources.files.read(candidate.source), precision=resources.context.precision,
        allowed_libraries=", ".join(resources.context.allow) or "none",
        arithmetic=arithmetic_line(facts.precision if facts else None, resources.context.precision),
    )
    try:
        answer = resources.ask(question)
    except AgentFailed as failure:
        return None, [failure.usage]
    if answer.value.faithful:
        return None, [answer.usage]
    problems = "; ".join(answer.value.problems) or "the kernel does not do all the model does"
    return Feedback(stage="verify", candidate_source=candidate.source,
                    message=f"soft verification: {problems}"), [answer.usage]
