"""`tools.untrusted_text`: what cannot be stored or would be obeyed by a terminal is replaced or written out;
honest text (non-ASCII identifiers, mathematical symbols, tabs, CRLF line ends) passes unchanged."""

from __future__ import annotations

import pytest

from kernelblaster.tools.untrusted_text import REPLACEMENT, for_terminal, is_storable, storable

OSC_52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # writes the clipboard on terminals that allow it
HONEST = [
    "// größe: Anzahl der Elemente; 行数 (rows); λ = 0.5\n__global__ void k(float* y) {}\n",
    "why: the bound is ≤ ∑ bytes ÷ 3.35 TB/s ≈ 0.04 ms, √n blocks × 4 warps → fewer stalls ✓",
    "line one\r\nline two\twith a tab\n",
    "emoji and symbols: 🚀 ∞ ∂ ∇ α β γ",
]


@pytest.mark.parametrize("text", HONEST)
def test_honest_text_is_storable_unchanged(text: str) -> None:
    assert storable(text) == text and is_storable(text)


@pytest.mark.parametrize("text", HONEST[:2] + HONEST[3:])
def test_honest_text_is_shown_on_the_terminal_unchanged(text: str) -> None:
    assert for_terminal(text) == text


def test_a_lone_surrogate_becomes_the_replacement_character_and_the_text_can_be_encoded() -> None:
    kept = storable('const char* s = "\ud800";')
    assert kept == f'const char* s = "{REPLACEMENT}";'
    assert kept.encode() == kept.encode("utf-8")


@pytest.mark.parametrize("control", ["\x1b", "\x07", "\x00", "\x7f", "\x9b", "\x9d", "\x0b", "\x0c"])
def test_each_control_character_but_tab_and_line_ends_becomes_the_replacement_character(control: str) -> None:
    assert storable(f"a{control}b") == f"a{REPLACEMENT}b"


def test_an_osc_52_sequence_keeps_only_its_inert_printable_part() -> None:
    assert storable(f"reason {OSC_52}") == f"reason {REPLACEMENT}]52;c;ZWNobyBwd25lZA=={REPLACEMENT}"


def test_the_terminal_sees_escape_sequences_written_out_not_obeyed() -> None:
    assert for_terminal(f"x {OSC_52} \x1b[2J") == "x \\x1b]52;c;ZWNobyBwd25lZA==\\x07 \\x1b[2J"


def test_the_terminal_sees_a_carriage_return_written_out_so_no_line_can_be_overwritten() -> None:
    assert for_terminal("compiled\rbest 99.00x") == "compiled\\rbest 99.00x"


def test_the_terminal_sees_a_lone_surrogate_and_a_c1_control_written_out() -> None:
    assert for_terminal("a\ud800b\x9bc") == "a\\ud800b\\x9bc"
