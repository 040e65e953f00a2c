"""The text form of a code answer (`CudaAnswer.from_text`): one `technique:` line, at most one `why:` line,
one fenced ```cuda block holding the whole file, the rest the explanation; anything ambiguous is refused
with what is wrong. A person's answer (`from_plain_text`) may use that form or be the file alone."""

from __future__ import annotations

import pytest

from kernelblaster.graph.llm.agents import AnswerFormatError
from kernelblaster.nodes.kernels import CudaAnswer

CODE = '#include "kb_problem.h"\nextern "C" int kb_forward() { return 0; }\n'


def _answer(head: str = "technique: vectorized_access\nUses float4 loads.\n", tag: str = "cuda") -> str:
    return f"{head}\n```{tag}\n{CODE}```\n"


def test_the_technique_the_explanation_and_the_code_are_read_apart() -> None:
    answer = CudaAnswer.from_text(_answer())
    assert (answer.technique, answer.explanation, answer.cuda_source) == ("vectorized_access", "Uses float4 loads.",
                                                                          CODE)


def test_technique_none_means_no_technique() -> None:
    assert CudaAnswer.from_text(_answer("technique: none\nA first version.\n")).technique is None


def test_a_technique_line_decorated_in_markdown_is_read() -> None:
    assert CudaAnswer.from_text(_answer("**Technique:** `Vectorized_Access`\n")).technique == "vectorized_access"


def test_an_answer_without_a_code_block_is_refused() -> None:
    with pytest.raises(AnswerFormatError, match="no ```cuda code block"):
        CudaAnswer.from_text("technique: none\n" + CODE)


def test_an_unclosed_code_block_is_refused() -> None:
    with pytest.raises(AnswerFormatError, match="not closed"):
        CudaAnswer.from_text("technique: none\n```cuda\n" + CODE)


def test_two_code_blocks_are_refused_as_ambiguous() -> None:
    with pytest.raises(AnswerFormatError, match="there are 2 code blocks"):
        CudaAnswer.from_text(_answer() + "\n```cuda\n// a second draft\n```\n")


def test_a_block_in_another_language_is_refused() -> None:
    with pytest.raises(AnswerFormatError, match="opened with ```cuda"):
        CudaAnswer.from_text(_answer(tag="python"))


def test_a_missing_technique_line_is_refused() -> None:
    with pytest.raises(AnswerFormatError, match="exactly one `technique: NAME` line"):
        CudaAnswer.from_text(_answer("Uses float4 loads.\n"))


def test_an_answer_written_as_text_reads_back_the_same() -> None:
    answer = CudaAnswer(technique="kernel_fusion", explanation="One pass.", cuda_source=CODE)
    assert CudaAnswer.from_text(answer.to_text()) == answer


def test_the_why_line_is_read_as_the_reason_for_the_choice_not_as_explanation() -> None:
    answer = CudaAnswer.from_text(_answer("technique: vectorized_access\n**Why:** loads are scalar\nUses float4.\n"))
    assert (answer.choice_reason, answer.explanation) == ("loads are scalar", "Uses float4.")


def test_an_answer_without_a_why_line_has_no_reason() -> None:
    assert CudaAnswer.from_text(_answer()).choice_reason is None


def test_two_why_lines_are_refused_as_ambiguous() -> None:
    with pytest.raises(AnswerFormatError, match="at most one `why:` line, found 2"):
        CudaAnswer.from_text(_answer("technique: vectorized_access\nwhy: one\nwhy: two\n"))


def test_an_answer_with_a_reason_written_as_text_reads_back_the_same() -> None:
    answer = CudaAnswer(technique="kernel_fusion", explanation="One pass.", cuda_source=CODE,
                        choice_reason="the three kernels re-read the same rows")
    assert CudaAnswer.from_text(answer.to_text()) == answer


def test_a_hand_written_answer_in_the_models_form_keeps_its_technique_and_reason() -> None:
    answer = CudaAnswer.from_plain_text(_answer("technique: vectorized_access\nwhy: loads are scalar\nUses float4.\n"))
    assert (answer.technique, answer.choice_reason, answer.cuda_source) == ("vectorized_access", "loads are scalar",
                                                                            CODE)


def test_a_hand_written_file_alone_takes_its_technique_from_its_first_comment() -> None:
    answer = CudaAnswer.from_plain_text(f"// technique: Tiling\n{CODE}")
    assert (answer.technique, answer.choice_reason) == ("tiling", None)
