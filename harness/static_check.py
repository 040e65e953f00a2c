"""Source rules for a candidate, checked before it is compiled.

Forbidden includes (PyTorch and Python; optional libraries unless the run allows them; files named by an
absolute or `..` path; headers named through a macro), forbidden API families (the catalogue in
tools/symbols.py), assembler directives that read files (`.incbin`, `.include`), code that runs when the
driver loads (constructors, init arrays, IFUNC resolvers), `#line` directives (the checks of the compiled
host code tell the candidate's lines by their file name) and the required kb_forward definition. Comments
and string literals are blanked before matching, so a rule named in a comment is not a violation;
violations carry the original line number and text.

These rules are the readable early warning for the agents, not the boundary: the OS sandbox
(tools/sandbox.py) is what keeps a candidate that gets past them from reaching anything.
"""

from __future__ import annotations

import bisect
import functools
import posixpath
import re
from dataclasses import dataclass

from pydantic import BaseModel

from kernelblaster.tools.symbols import FORBIDDEN_APIS, LIBRARIES, validate_allow
from kernelblaster.tools.untrusted_text import LONE_SURROGATE

PYTORCH_INCLUDE = re.compile(r"^(?:torch|ATen|c10|caffe2|pybind11)/|^(?:Python|torch)\.h$")
# Where the preprocessor sees a directive: at a line's start (a lone carriage return ends a line too), after
# whitespace as its lexer counts it (space, tab, form feed, vertical tab, NUL, and a byte-order mark at the
# file's start; comments are blanked before matching), at `#` or its digraph `%:`.
_DIRECTIVE_START = r"(?:^|(?<=\r))[ \t\f\v\0\ufeff]*(?:#|%:)[ \t\f\v\0]*"
# A backslash ending a line splices it to the next, also with spaces between (GCC warns, and splices).
_SPLICE = re.compile(r"\\[ \t\f\v]*(?:\r\n|\n|\r)")
_DIRECTIVE = _DIRECTIVE_START + r"(?:include|include_next|import|embed)\b[ \t\f\v\0]*"
_INCLUDE = re.compile(_DIRECTIVE + r"[<\"](?P<path>[^>\"]+)[>\"]", re.MULTILINE)
_COMPUTED_INCLUDE = re.compile(_DIRECTIVE + r"(?P<path>[^<\"\s]\S*)", re.MULTILINE)


def _split_literal(word: str) -> str:
    """`word` also when adjacent string literals split it (".inc" "bin")."""
    return r'(?:"\s*")?'.join(map(re.escape, word))


# Assembler directives that read a file into the object or the assembly (in asm strings or macros).
_ASSEMBLER_FILE = re.compile(r"\.\s*(?:" + _split_literal("incbin") + "|" + _split_literal("include") + r")\b",
                             re.IGNORECASE)
# System-call instructions in inline assembly (x86-64, i386, AArch64).
_SYSTEM_CALL_INSTRUCTION = re.compile(r"\b(?:syscall|sysenter)\b(?!\s*\()|\bint\s+\$?0x80\b|\bsvc\s+#?0\b")
_LOAD_TIME_CODE = re.compile(
    r"__attribute__\s*\(\(\s*(?:__)?(?:constructor|destructor|ifunc)(?:__)?\b"
    r"|\[\[\s*gnu\s*::\s*(?:constructor|destructor|ifunc)\b"
    r"|\.(?:preinit_array|init_array|fini_array|ctors|dtors)\b"
)
# `#line 12 "file"` and GNU's `# 12 "file"` (also spelled `%:`, or split by a backslash-newline) rename the
# lines after them: the checks of the compiled host code tell the candidate's lines from the system's by name.
_LINE_DIRECTIVE = re.compile(_DIRECTIVE_START + r"(?:line\b|\d)", re.MULTILINE)
_KB_FORWARD_DEFINITION = re.compile(r"\bkb_forward\s*\([^;{}]*\)\s*\{")
KB_FORWARD_SIGNATURE = (
    'extern "C" int kb_forward(const KBTensor* inputs, const KBTensor* params, KBTensor* outputs, cudaStream_t stream)'
)


class StaticViolation(BaseModel):
    """One broken source rule; `line` is 1-based in the original source (None for whole-file rules)."""

    rule: str
    line: int | None
    text: str
    message: str


def check_source(source: str, allow: frozenset[str] = frozenset()) -> list[StaticViolation]:
    """Every violation in the candidate source, in line order (whole-file rules last). The rules are a pure
    function of the source and the allowed libraries, so a source checked again (an early refusal, then its
    build) reuses the answer."""
    return [violation.model_copy() for violation in _check_source(source, validate_allow(allow))]


@functools.lru_cache(maxsize=32)
def _check_source(source: str, allow: frozenset[str]) -> tuple[StaticViolation, ...]:
    # A lone surrogate (a str from a JSON "\ud800" escape, say) is no character a file can hold: writing or
    # hashing the source would fail in the harness's process.
    surrogate = LONE_SURROGATE.search(source)
    if surrogate is not None:  # alone: the other rules quote lines, which would carry it on
        line = source.count("\n", 0, surrogate.start()) + 1
        return (StaticViolation(rule="not_text", line=line, text="", message=(
            f"line {line} holds a lone surrogate (U+{ord(surrogate[0]):04X}), which is not text a file can hold: "
            "write the source as plain UTF-8")),)
    stripped = strip_comments_and_strings(source)
    found = [*_include_violations(stripped, source, allow), *_api_violations(stripped, source),
             *_pattern_violations(stripped.without_comments, source, _ASSEMBLER_FILE, "assembler_file",
                                  "read files through the assembler (.incbin, .include)"),
             *_pattern_violations(stripped.without_comments, source, _SYSTEM_CALL_INSTRUCTION, "system_call",
                                  "make system calls directly (the syscall/svc instruction)"),
             *_pattern_violations(stripped.without_comments, source, _LOAD_TIME_CODE, "load_time_code",
                                  "run code when the driver loads or unloads (constructors, init arrays, IFUNC "
                                  "resolvers)"),
             *_line_directive_violations(source)]
    found = list({(v.rule, v.line): v for v in found}.values())
    found.sort(key=lambda v: v.line or 0)
    if not _KB_FORWARD_DEFINITION.search(stripped.code):
        found.append(
            StaticViolation(
                rule="missing_kb_forward",
                line=None,
                text="",
                message=f"the source does not define kb_forward; define {KB_FORWARD_SIGNATURE}",
            )
        )
    return tuple(found)


@dataclass(frozen=True)
class StrippedSource:
    """The source with comments blanked (`without_comments`) and also string/char contents (`code`).

    Both keep every newline and character position, so offsets map back to the original lines.
    """

    without_comments: str
    code: str


def strip_comments_and_strings(source: str) -> StrippedSource:
    """Blank comments, and separately string and character literal contents, keeping positions."""
    without_comments = list(source)
    code = list(source)
    i, n = 0, len(source)
    while i < n:
        if source.startswith("//", i):
            end = _line_comment_end(source, i)
            _blank(without_comments, i, end)
            _blank(code, i, end)
        elif source.startswith("/*", i):
            close = source.find("*/", i + 2)
            end = n if close < 0 else close + 2
            _blank(without_comments, i, end)
            _blank(code, i, end)
        elif source[i] == '"' or (source[i] == "'" and not _is_digit_separator(source, i)):
            end = _literal_end(source, i)
            _blank(code, i + 1, end - 1)
        else:
            end = i + 1
        i = max(end, i + 1)
    return StrippedSource(without_comments="".join(without_comments), code="".join(code))


def _blank(chars: list[str], start: int, end: int) -> None:
    for k in range(start, min(end, len(chars))):
        if chars[k] != "\n":
            chars[k] = " "


def _line_comment_end(source: str, start: int) -> int:
    """End of a // comment; a backslash before the newline continues it onto the next line."""
    i = start
    while True:
        newline = source.find("\n", i)
        if newline < 0:
            return len(source)
        if source[newline - 1] != "\\" and source[newline - 2 : newline] != "\\\r":
            return newline
        i = newline + 1


def _is_digit_separator(source: str, i: int) -> bool:
    """True for the ' in 1'000'000 (C++14), which is not a character literal: inside a number, as the
    preprocessor reads one, a ' continues it only before a digit, letter or underscore (in `0x1'"'` it opens a
    character literal, and reading it otherwise would hide what follows from every rule)."""
    start = i
    while start > 0 and (source[start - 1].isalnum() or source[start - 1] == "_"):
        start -= 1
    continues = i + 1 < len(source) and (source[i + 1].isalnum() or source[i + 1] == "_")
    return start < i and source[start].isdigit() and continues


_RAW_STRING_PREFIX = re.compile(r"(?:u8|[uUL])?R$")


def _literal_end(source: str, start: int) -> int:
    """Index just past the string or character literal opening at `start` (raw strings included)."""
    quote = source[start]
    prefix_start = max(0, start - 3)
    if quote == '"' and _RAW_STRING_PREFIX.search(source[prefix_start:start]):
        open_paren = source.find("(", start)
        if open_paren > 0:
            delimiter = source[start + 1 : open_paren]
            close = source.find(f'){delimiter}"', open_paren)
            return len(source) if close < 0 else close + len(delimiter) + 2
    i = start + 1
    while i < len(source) and source[i] != quote and source[i] != "\n":
        i += 2 if source[i] == "\\" else 1
    return min(i + 1, len(source))


class _Lines:
    """Maps an offset in the source to its 1-based line number and original text."""

    def __init__(self, source: str) -> None:
        self._starts = [0, *(m.end() for m in re.finditer("\n", source))]
        self._lines = source.split("\n")

    def at(self, offset: int) -> tuple[int, str]:
        index = bisect.bisect_right(self._starts, offset) - 1
        return index + 1, self._lines[index].strip()


def _include_violations(stripped: StrippedSource, source: str, allow: frozenset[str]) -> list[StaticViolation]:
    lines = _Lines(source)
    violations = []
    for match in _INCLUDE.finditer(stripped.without_comments):
        line, text = lines.at(match.start("path"))
        reason = _include_reason(match["path"], allow)
        if reason is not None:
            rule, why = reason
            violations.append(StaticViolation(rule=rule, line=line, text=text, message=f"line {line}: {text} — {why}"))
    for match in _COMPUTED_INCLUDE.finditer(stripped.without_comments):
        line, text = lines.at(match.start("path"))
        violations.append(StaticViolation(
            rule="include_path", line=line, text=text,
            message=f"line {line}: {text} — name the header literally (#include <name> or \"name\"), not "
                    "through a macro"))
    return violations


def _include_reason(path: str, allow: frozenset[str]) -> tuple[str, str] | None:
    """(rule, explanation) when including `path` breaks a rule."""
    path = posixpath.normpath(path)
    if path.startswith(("/", "../")) or path == "..":
        return "outside_file", (f"{path} is outside the headers a candidate may include (the CUDA toolkit's, the "
                                "system's and kb_problem.h)")
    if PYTORCH_INCLUDE.search(path):
        return "pytorch_include", "candidates may not use PyTorch/ATen/c10 or Python; write plain CUDA C++"
    for library in LIBRARIES:
        if library.name not in allow and re.search(library.include_pattern, path):
            return (
                f"library:{library.name}",
                f"{library.display_name} is not allowed in this run (allow it with --allow {library.name})",
            )
    for api in FORBIDDEN_APIS:
        if path in api.headers:
            return api.rule, f"candidates may not {api.message}"
    return None


def _api_violations(stripped: StrippedSource, source: str) -> list[StaticViolation]:
    lines = _Lines(source)
    # Include lines are judged by the include rules only (`#include <fstream>` is not a use of fstream).
    include_lines = {lines.at(m.start())[0] for m in _INCLUDE.finditer(stripped.without_comments)}
    violations = []
    for api in FORBIDDEN_APIS:
        for match in _api_pattern(api.functions, api.source_patterns).finditer(stripped.code):
            line, text = lines.at(match.start())
            if line in include_lines:
                continue
            violations.append(
                StaticViolation(
                    rule=api.rule,
                    line=line,
                    text=text,
                    message=f"line {line}: {text} — {match[0].rstrip('( ')}: candidates may not {api.message}",
                )
            )
    return violations


def _pattern_violations(text: str, source: str, pattern: re.Pattern[str], rule: str,
                        message: str) -> list[StaticViolation]:
    """One violation per line where `pattern` matches `text` (the source with comments blanked)."""
    lines = _Lines(source)
    found: dict[int, StaticViolation] = {}
    for match in pattern.finditer(text):
        line, line_text = lines.at(match.start())
        found.setdefault(line, StaticViolation(rule=rule, line=line, text=line_text,
                                               message=f"line {line}: {line_text} — candidates may not {message}"))
    return list(found.values())


def _line_directive_violations(source: str) -> list[StaticViolation]:
    """`#line` directives, found after backslash-newlines are spliced as the preprocessor splices them (the
    line numbers given are those of the original source)."""
    spliced, line_of = [], []  # the spliced text, and for each of its characters the original line
    line = 1
    i = 0
    while i < len(source):
        if splice := _SPLICE.match(source, i):
            i = splice.end()
            line += 1
            continue
        spliced.append(source[i])
        line_of.append(line)
        line += source[i] == "\n"
        i += 1
    text = strip_comments_and_strings("".join(spliced)).without_comments
    lines = source.split("\n")
    violations = []
    for match in _LINE_DIRECTIVE.finditer(text):
        number = line_of[match.start()] if match.start() < len(line_of) else len(lines)
        shown = lines[number - 1].strip()
        violations.append(StaticViolation(rule="line_directive", line=number, text=shown,
                                          message=f"line {number}: {shown} — candidates may not rename their lines "
                                                  "(#line directives)"))
    return violations


def _api_pattern(functions: tuple[str, ...], patterns: tuple[str, ...]) -> re.Pattern[str]:
    """Calls of `functions`, also under glibc's internal aliases (`__popen`, `__libc_system`, `_IO_popen`),
    but not member calls such as `x.write(`, or any of `patterns`."""
    alternatives = list(patterns)
    if functions:
        alternatives.append(r"(?<![\w.>$])(?:__libc_|_IO_|_+)?(?:" + "|".join(map(re.escape, functions)) + r")\s*\(")
    return re.compile("|".join(f"(?:{a})" for a in alternatives) or r"(?!)")
