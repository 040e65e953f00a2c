"""Inline assembly in a candidate's host code, found in what the host compiler saw and what it emitted.

The host compiler keeps its preprocessed input (`.ii`: every macro expanded, every `#x` stringised) and its
assembly output (`.s`) when asked (`-save-temps`). Text reaches the assembler from C++ in four ways, all
looked for, after the preprocessor, in the lines that come from the candidate's own files:
- an asm statement or a top-level asm (`asm`, `__asm__`, `__asm`, with any qualifiers);
- an asm label (`int f() __asm__("name")`) whose string is not a plain symbol name: the compiler writes the
  name into the assembly as it is, so a newline in it starts an instruction;
- a string in an attribute (`section`, `alias`, `symver`, ...) that is not a plain name, for the same reason;
and, in the assembly output, every inline asm block the compiler marked with its source position (an asm
statement inside a function, also one a system header's macro put into the candidate's code).
Device code never reaches the host compiler (nvcc compiles it separately), so device `asm` is not seen.

The assembly output also shows what the two pieces of load-time code the object check lets through really do
(`load_time_calls`): nvcc's registration constructor and <iostream>'s initialiser. Candidate code can reach
into both without a relocation the object would show (a `__device__` variable whose type overloads unary `&`,
which the registration calls; a global object whose constructor calls a static function of the same section),
so every function they call and every symbol the initialiser names is held to an allowlist here, by name, as
the compiler wrote it (x86-64 assembly; on other machines the object check stands alone).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_LINE_MARKER = re.compile(r'^# (?P<line>\d+) "(?P<file>(?:[^"\\]|\\.)*)"(?: \d+)*$')
_ASM_KEYWORD = re.compile(r"(?<![\w$])(?:__asm__|__asm|asm)(?![\w$])")
_QUALIFIERS = re.compile(r"\s*(?:(?:volatile|__volatile__|__volatile|goto|inline|__inline)\s*)*")
_ATTRIBUTE_START = re.compile(r"(?<![\w$])__attribute(?:__)?\s*\(\(|\[\[")
_PLAIN_SYMBOL = re.compile(r"[A-Za-z_.$][\w.$@]*")
_PLAIN_ATTRIBUTE_TEXT = re.compile(r"[\w.$@,=+\- ]*")
# In the assembly: an asm statement's text between its position marker and the marker back to the compiler.
_ASSEMBLY_BLOCK = re.compile(r'^# (?P<line>\d+) "(?P<file>[^"]*)" 1\n(?P<body>.*?)^# \d+ "[^"]*" 2$',
                             re.MULTILINE | re.DOTALL)


LOAD_TIME_FILE = "<load time>"  # the `file` of a finding that is load-time code, not inline assembly


@dataclass(frozen=True)
class Finding:
    """Inline assembly at `file`:`line` (as the preprocessor named the file), with its text."""

    file: str
    line: int
    text: str


def inline_assembly(preprocessed: str, assembly: str, candidate_file: Callable[[str], bool]) -> list[Finding]:
    """Every way text reaches the assembler from the candidate's own lines (files for which `candidate_file`
    is true) of `preprocessed`, and every marked asm block of `assembly` (from any file; the caller decides
    which files it trusts). Empty asm statements (compiler barriers) are not findings."""
    found = _from_source(preprocessed, candidate_file)
    for match in _ASSEMBLY_BLOCK.finditer(assembly):
        text = _one_line(match["body"])
        if text:
            found.append(Finding(match["file"], int(match["line"]), text))
    found += [Finding(LOAD_TIME_FILE, 0, text) for text in load_time_calls(assembly)]
    return list(dict.fromkeys(found))


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())[:200]


@dataclass
class _Source:
    """The candidate's lines of the preprocessed text (others blank), where each came from, and its string
    literals (start, end, contents) with their contents blanked in `code`."""

    code: str
    origins: list[tuple[str, int]]  # per line of `code`
    literals: list[tuple[int, int, str]]

    def origin(self, offset: int) -> tuple[str, int]:
        return self.origins[self.code.count("\n", 0, offset)]

    def literals_in(self, start: int, end: int) -> list[str]:
        return [text for first, last, text in self.literals if start <= first and last <= end]


def _from_source(preprocessed: str, candidate_file: Callable[[str], bool]) -> list[Finding]:
    source = _candidate_lines(preprocessed, candidate_file)
    found = []
    for match in _ASM_KEYWORD.finditer(source.code):
        qualifiers = _QUALIFIERS.match(source.code, match.end())
        opening = qualifiers.end() if qualifiers else match.end()
        if opening >= len(source.code) or source.code[opening] != "(":
            continue
        closing = _matching(source.code, opening)
        operands = source.code.find(":", opening, closing)  # the template is what comes before the operands
        text = "".join(source.literals_in(opening, operands if operands >= 0 else closing))
        is_label = _after_declarator(source.code, match.start())
        plain_label = (is_label and qualifiers is not None and not qualifiers.group().strip() and operands < 0
                       and _PLAIN_SYMBOL.fullmatch(text) is not None)
        if not plain_label and (is_label or text.strip()):  # an empty template is a compiler barrier
            file, line = source.origin(match.start())
            found.append(Finding(file, line, _one_line(text.replace("\\n", "\n").replace("\\t", " ")) or "asm label"))
    for match in _ATTRIBUTE_START.finditer(source.code):
        opening = match.end() - 1
        closing = _matching(source.code, opening)
        for text in source.literals_in(opening, closing):
            if not _PLAIN_ATTRIBUTE_TEXT.fullmatch(text):
                file, line = source.origin(match.start())
                found.append(Finding(file, line, f"attribute string {text[:80]!r}"))
    return found


def _candidate_lines(preprocessed: str, candidate_file: Callable[[str], bool]) -> _Source:
    lines, origins = [], []
    file, line, keep = "", 0, False
    judged: dict[str, bool] = {}
    for raw in preprocessed.split("\n"):
        marker = _LINE_MARKER.match(raw) if raw.startswith("# ") else None
        if marker:
            file, line = marker["file"], int(marker["line"])
            if file not in judged:
                judged[file] = candidate_file(file)
            keep = judged[file]
            lines.append("")
            origins.append((file, line))
            continue
        # Other directives left in preprocessed text (#pragma) are not code: a word they end with is no declarator.
        lines.append(raw if keep and not raw.lstrip().startswith("#") else "")
        origins.append((file, line))
        line += 1
    code, literals = _blank_literals("\n".join(lines))
    return _Source(code, origins, literals)


_RAW_STRING = re.compile(r'(?:u8|[uUL])?R"(?P<delimiter>[^()\\\s]{0,16})\(')


def _blank_literals(text: str) -> tuple[str, list[tuple[int, int, str]]]:
    """`text` with the contents of string and character literals blanked (newlines kept), and each string
    literal as (start, end, contents as written)."""
    chars = list(text)
    literals = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        raw = _RAW_STRING.match(text, i) if c in "uULR" else None
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = text.find(f'){raw["delimiter"]}"', raw.end())
            end = n if close < 0 else close + len(raw["delimiter"]) + 2
            literals.append((i, end, text[raw.end():max(raw.end(), end - len(raw["delimiter"]) - 2)]))
            _blank(chars, raw.end(), end - 1)
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            end = min(j + 1, n)
            if c == '"':
                literals.append((i, end, text[i + 1:end - 1]))
            _blank(chars, i + 1, end - 1)
            i = end
        else:
            i += 1
    return "".join(chars), literals


def _blank(chars: list[str], start: int, end: int) -> None:
    for k in range(start, min(end, len(chars))):
        if chars[k] != "\n":
            chars[k] = " "


def _matching(code: str, opening: int) -> int:
    """The index just past the bracket that closes the one at `opening` (the end of `code` if none does)."""
    pairs = {"(": ")", "[": "]"}
    depth, close, open_ = 0, pairs[code[opening]], code[opening]
    for k in range(opening, len(code)):
        if code[k] == open_:
            depth += 1
        elif code[k] == close:
            depth -= 1
            if depth == 0:
                return k + 1
    return len(code)


# Words after which an `asm(...)` is a statement or a top-level asm, though they end like a declarator.
_NOT_DECLARATORS = frozenset({"__extension__", "else", "do", "return", "case", "default", "extern"})
_LAST_WORD = re.compile(r"[\w$]+$")


def _after_declarator(code: str, offset: int) -> bool:
    """Whether the asm keyword at `offset` follows a declarator (`int f(int)`, `x`, `a[4]`): then it is a label."""
    stripped = code[:offset].rstrip()
    if not stripped:
        return False
    if stripped[-1] in ")]":
        return True
    word = _LAST_WORD.search(stripped)
    return word is not None and word.group() not in _NOT_DECLARATORS and not word.group()[0].isdigit()


# ---------------------------------------------------------------------------------------------------
# Load-time code the object check lets through, as the compiler wrote it
# ---------------------------------------------------------------------------------------------------
# nvcc's registration constructor, the functions of its header it calls, and what they may call: the runtime's
# registration entry points and atexit (once: the unregistration nvcc itself registers).
_NVCC_CONSTRUCTORS = frozenset({"_ZL24__sti____cudaRegisterAllv", "__sti____cudaRegisterAll"})
_NVCC_HELPERS = frozenset({"_ZL31__nv_cudaEntityRegisterCallbackPPv", "_ZL22____nv_dummy_param_refPv",
                           "_ZL32__nv_init_managed_rt_with_modulePPv"})
_NVCC_CALLS = frozenset({"__cudaRegisterFatBinary", "__cudaRegisterFatBinaryEnd", "__cudaRegisterFunction",
                         "__cudaRegisterVar", "__cudaRegisterManagedVar", "__cudaRegisterTexture",
                         "__cudaRegisterSurface", "__cudaInitModule", "atexit"})
# <iostream>'s initialiser (before GCC 13): it constructs std::ios_base::Init and registers its destructor, and
# names nothing else. Any function the compiler named as a translation unit's initialiser is held to it: the
# object check lets such a function through only when its relocations are these.
_INITIALISER_PREFIX = "_GLOBAL__sub_I_"
_IOSTREAM_CALLS = frozenset({"_ZNSt8ios_base4InitC1Ev", "__cxa_atexit"})
_IOSTREAM_NAMES = _IOSTREAM_CALLS | {"_ZStL8__ioinit", "_ZNSt8ios_base4InitD1Ev", "__dso_handle"}
_REGISTER_ONCE = frozenset({"atexit", "__cxa_atexit"})  # registering more than the toolchain's own is exit-time code

_LABEL = re.compile(r"^(?P<name>[A-Za-z_.$][\w.$@]*):\s*$")
_SIZE = re.compile(r"^\s*\.size\s+(?P<name>[^,\s]+)\s*,")
_SET = re.compile(r"^\s*\.(?:set|equiv|equ)\s+(?P<name>[^,\s]+)\s*,\s*(?P<target>[^\s]+)\s*$")
_INSTRUCTION = re.compile(r"^\s+(?P<op>[a-z][a-z0-9]*)\b\s*(?P<args>.*)$")
_OPERAND_SYMBOL = re.compile(r"(?<![%\w.$])(?P<name>[A-Za-z_.][\w.$]*)(?:@\w+)?")
_PREFIXES = frozenset({"rep", "repe", "repz", "repne", "repnz", "lock", "notrack", "bnd", "data16"})
_X86_REGISTER = re.compile(r"%[re]?(?:ax|bx|cx|dx|si|di|sp|bp|ip)\b|%r\d+")


def load_time_calls(assembly: str) -> list[str]:
    """What nvcc's registration constructor and any translation-unit initialiser (`_GLOBAL__sub_I_...`) do
    beyond their own job, one line each: a call of anything but their allowlisted functions, an indirect call
    or jump, atexit or __cxa_atexit more than once, and, in an initialiser, any symbol but <iostream>'s. Empty
    for assembly that is not x86-64 (its syntax is not read here)."""
    if not _X86_REGISTER.search(assembly):
        return []
    bodies, aliases = _function_bodies(assembly)
    problems: list[str] = []
    for name in bodies.keys() | aliases.keys():
        if name in _NVCC_CONSTRUCTORS:
            problems += _misdeeds(name, bodies, aliases, calls=_NVCC_CALLS, helpers=_NVCC_HELPERS, names=None)
        elif name.startswith(_INITIALISER_PREFIX) and not name.endswith(".cold"):
            problems += _misdeeds(name, bodies, aliases, calls=_IOSTREAM_CALLS, helpers=frozenset(),
                                  names=_IOSTREAM_NAMES)
    return list(dict.fromkeys(problems))


def _function_bodies(assembly: str) -> tuple[dict[str, list[tuple[str, str]]], dict[str, str]]:
    """Each label's instructions (mnemonic, operands) up to its `.size` or the next label that is not local
    (`.L`), and the aliases `.set` makes."""
    bodies: dict[str, list[tuple[str, str]]] = {}
    aliases: dict[str, str] = {}
    current: list[tuple[str, str]] | None = None
    for line in assembly.splitlines():
        label = _LABEL.match(line)
        if label:
            if not label["name"].startswith(".L"):
                current = bodies.setdefault(label["name"], [])
            continue
        alias = _SET.match(line)
        if alias:
            aliases[alias["name"]] = alias["target"]
            continue
        if _SIZE.match(line):
            current = None
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and current is not None:
            op, args = instruction["op"], instruction["args"].split("#", 1)[0].strip()
            while op in _PREFIXES and args:  # `notrack jmp *%rax`, `rep stosq`: the instruction is what follows
                op, _, args = args.partition(" ")
                op, args = op.strip(), args.strip()
            current.append((op, args))
    return bodies, aliases


def _misdeeds(root: str, bodies: dict[str, list[tuple[str, str]]], aliases: dict[str, str], *,
              calls: frozenset[str], helpers: frozenset[str], names: frozenset[str] | None) -> list[str]:
    """What the code reachable from `root` (through `helpers` and its cold parts) does that it may not: calls
    outside `calls`, indirect control transfers, registrations at exit beyond one of each, symbols outside
    `names` (when given)."""
    problems: list[str] = []
    who = "nvcc's kernel registration" if root in _NVCC_CONSTRUCTORS else "the initialiser of global objects"
    registered: dict[str, int] = {}
    seen: set[str] = set()
    pending = [root]
    while pending:
        name = pending.pop()
        while name in aliases and name not in bodies:
            name = aliases[name]
        if name in seen:
            continue
        seen.add(name)
        if name not in bodies:
            problems.append(f"{who} runs {name}, whose code the assembly does not show")
            continue
        for op, args in bodies[name]:
            transfer = op.startswith("j") or op.startswith("call")
            if transfer and args.startswith("*"):
                problems.append(f"{who} calls through a pointer ({op} {args})")
                continue
            for match in _OPERAND_SYMBOL.finditer(args):
                symbol = match["name"]
                if symbol.startswith(".L"):
                    continue
                if transfer:
                    if symbol in helpers or symbol.startswith(tuple(f"{s}.cold" for s in seen)):
                        pending.append(symbol)
                    elif symbol in calls:
                        registered[symbol] = registered.get(symbol, 0) + 1
                    else:
                        problems.append(f"{who} calls {symbol}")
                elif names is not None and symbol not in names:
                    problems.append(f"{who} uses {symbol}")
    problems += [f"{who} registers {count} functions with {symbol}" for symbol, count in sorted(registered.items())
                 if symbol in _REGISTER_ONCE and count > 1]
    return problems
