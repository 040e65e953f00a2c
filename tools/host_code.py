"""Inline assembly in a candidate's host code, found in what the host compiler saw and what it emitted.

The host compiler keeps its preprocessed input (`.ii`: every macro expanded, every `#x` stringised) and its
assembly output (`.s`) when asked (`-save-temps`). Text reaches the assembler from C++ in four ways, all
looked for, after the preprocessor, in the lines that come from the candidate's own files:
- an asm statement or a top-level asm (`asm`, `__asm__`, `__asm`, with any qualifiers);
- an asm label (`int f() __asm__("name")`) whose string is not a plain symbol name: the compiler writes the
  name into the assembly as it is, so a newline in it starts an instruction;
- a string in an attribute (`section`, `alias`, `symver`, ...) that is not a plain name, for the same reason;
and, in the assembly output, every inline asm block the compiler marked with its source position (an asm
statement inside a function, also one a system header's macro put into the candidate's code), and all top-level
text in the other files' lines besides nvcc's fatbinary (a candidate's macro that a header expands, such as a
redefined __BEGIN_DECLS, puts its text on the header's line; no header the candidate may include has host
asm of its own): asm statements, asm labels that are not plain names, strings of the attributes the compiler
writes into the assembly (`section`, `alias`, `symver`, ...).
Device code never reaches the host compiler (nvcc compiles it separately), so device `asm` is not seen.

The assembly output also shows what the two pieces of load-time code the object check lets through really do
(`load_time_calls`): nvcc's registration constructor and <iostream>'s initialiser. Candidate code can reach
into both without a relocation the object would show (a `__device__` variable whose type overloads unary `&`,
which the registration calls; a global object whose constructor calls a static function of the same section),
so every function they call and every symbol the initialiser names is held to an allowlist here, by name, as
the compiler wrote it (x86-64 assembly; on other machines the object check stands alone).
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# A marker of the preprocessor's output, with its flags (1 entering an included file, 2 leaving it). The file
# name's pattern is unrolled (runs of plain characters between escapes): every line of the two megabytes of
# preprocessed headers that starts "# " is matched against it, twice per build.
_LINE_MARKER = re.compile(r'^# (?P<line>\d+) "(?P<file>[^"\\]*(?:\\.[^"\\]*)*)"(?P<flags>(?: \d+)*)$', re.MULTILINE)
_ASM_KEYWORD = re.compile(r"(?<![\w$])(?:__asm__|__asm|asm)(?![\w$])")
_QUALIFIERS = re.compile(r"\s*(?:(?:volatile|__volatile__|__volatile|goto|inline|__inline)\s*)*")
_ATTRIBUTE_START = re.compile(r"(?<![\w$])__attribute(?:__)?\s*\(\(|\[\[")
_PLAIN_SYMBOL = re.compile(r"[A-Za-z_.$][\w.$@]*")
_PLAIN_ATTRIBUTE_TEXT = re.compile(r"[\w.$@,=+\- ]*")
# In the assembly: an asm statement's text between its position marker and the marker back to the compiler.
_ASSEMBLY_BLOCK = re.compile(r'^# (?P<line>\d+) "(?P<file>[^"]*)" 1\n(?P<body>.*?)^# \d+ "[^"]*" 2$',
                             re.MULTILINE | re.DOTALL)


LOAD_TIME_FILE = "<load time>"  # the `file` of a finding that is load-time code, not inline assembly
RENAMED_LINES_FILE = "<renamed lines>"  # the `file` of a finding that is a line directive renaming a file
_HEADER_FINDINGS_SHOWN = 3  # a macro in a header's declarations repeats on every line: the first few say it
HEADER_FILE = "<header>"  # the `file` of assembly text in another file's lines (a header's); its text names where


@dataclass(frozen=True)
class Finding:
    """Inline assembly at `file`:`line` (as the preprocessor named the file), with its text."""

    file: str
    line: int
    text: str
    template: str | None = None  # an asm statement's template as written (None for labels and attributes)


def inline_assembly(preprocessed: str, assembly: str, candidate_file: Callable[[str], bool],
                    fatbinary: str) -> list[Finding]:
    """Every way text reaches the assembler from the candidate's own lines (files for which `candidate_file`
    is true) of `preprocessed`, every marked asm block of `assembly` (from any file; the caller decides
    which files it trusts), asm in any other file's lines but nvcc's fatbinary file (`fatbinary`, as the
    preprocessor names it: a name the candidate cannot know; `HEADER_FILE`) and load-time code beyond the
    toolchain's own (`LOAD_TIME_FILE`). Empty asm statements (compiler barriers) are not findings."""
    found = _from_source(preprocessed, candidate_file)
    for match in _ASSEMBLY_BLOCK.finditer(assembly):
        text = _one_line(match["body"])
        if text:
            found.append(Finding(match["file"], int(match["line"]), text))
    found += [Finding(HEADER_FILE, 0, f"{finding.file}:{finding.line}: {finding.text}")
              for finding in _from_headers(preprocessed, candidate_file, fatbinary)[:_HEADER_FINDINGS_SHOWN]]
    found += [Finding(LOAD_TIME_FILE, 0, text) for text in load_time_calls(assembly)]
    return list(dict.fromkeys(found))


# A line the C preprocessor or cudafe++ would read as a directive (`#` or its digraph after blanks).
_DIRECTIVE_LIKE = re.compile(r"^[ \t\f\v]*(?:#|%:).*$", re.MULTILINE)


def renamed_lines(preprocessed: str) -> list[Finding]:
    """Line directives of the source (`#line 9 "name"`, GNU's `# 9 "name"`), however spelled, seen in the first
    preprocessor's output (nvcc's host preprocessing, before cudafe++ rewrites the markers without flags), where
    they would make the candidate's lines pass for a header's: a marker naming another file than the one whose
    lines come next without entering (flag 1) or leaving (2) it, once the main file has begun; and any line
    there that reads as a directive but is not the preprocessor's own marker or pragma (an empty macro before
    `# 9 "name"` hides it from this preprocessor, and cudafe++, which reads the output again, obeys it). A GNU marker
    written with those flags reads as an include here (and the dependency list names its file too): the source
    rules (harness/static_check.py) are what refuse it."""
    suspects = [line for line in _DIRECTIVE_LIKE.finditer(preprocessed)
                if not (_LINE_MARKER.fullmatch(line[0]) or line[0].startswith("#pragma"))]
    # A line inside a raw string literal is no directive; the literals are blanked only when there is a suspect.
    code = _blank_literals(preprocessed)[0] if suspects else ""
    found = [Finding(RENAMED_LINES_FILE, 0, f"a directive left for cudafe++: {line[0].strip()[:80]}")
             for line in suspects if _DIRECTIVE_LIKE.match(code, line.start())]
    main = current = None
    begun = False
    for marker in _LINE_MARKER.finditer(preprocessed):
        file, line = marker["file"], int(marker["line"])
        main = main or file
        moves = {"1", "2"} & set(marker["flags"].split())
        if not moves and current is not None and file != current:
            if begun or not (_pseudo_file(file) or _pseudo_file(current)):
                found.append(Finding(RENAMED_LINES_FILE, line, f"lines of {current} renamed {file}:{line}"))
            elif file == main:
                begun = True
        current = file
    return found


def _pseudo_file(name: str) -> bool:
    """The preprocessor's own names for what no file holds (`<built-in>`, `<command-line>`)."""
    return name.startswith("<") and name.endswith(">")


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
        return [text for _, text in self.literals_with_starts(start, end)]

    def literals_with_starts(self, start: int, end: int) -> list[tuple[int, str]]:
        """The literals inside [start, end), with where each starts (the literals are in order)."""
        first = bisect.bisect_left(self.literals, (start, -1, ""))
        found = []
        for begin, last, text in self.literals[first:]:
            if begin >= end:
                break
            if last <= end:
                found.append((begin, text))
        return found


def _from_source(preprocessed: str, candidate_file: Callable[[str], bool]) -> list[Finding]:
    return _scan(_candidate_lines(preprocessed, candidate_file), headers=False)


def _from_headers(preprocessed: str, candidate_file: Callable[[str], bool], fatbinary: str) -> list[Finding]:
    """Assembly text in the lines of every file but the candidate's and nvcc's fatbinary file (whose one
    top-level asm is the fatbinary), except asm statements whose template is one a header included here
    writes itself (libcu++'s `pause` in its spin loop, through its own macro)."""
    def other_file(name: str) -> bool:
        return not candidate_file(name) and name != fatbinary
    source = _candidate_lines(preprocessed, other_file)
    found = _scan(source, headers=True)
    if any(finding.template is not None for finding in found):
        headers = tuple(sorted({file for file, _ in source.origins if file.startswith("/") and other_file(file)}))
        own = frozenset().union(*(_asm_templates_of(header) for header in headers))
        found = [finding for finding in found if finding.template is None or finding.template not in own]
    return found


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


@functools.lru_cache(maxsize=4096)
def _asm_templates_of(path: str) -> frozenset[str]:
    """The templates of the asm statements a header file writes (in its own text, macros included)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return frozenset()
    code, literals = _blank_literals(_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text))
    source = _Source(code, [("", 0)] * (code.count("\n") + 1), literals)
    return frozenset(finding.template for finding in _scan(source, headers=True) if finding.template is not None)


# Attributes whose strings the compiler writes into the assembly (others, such as a deprecation message, it
# does not); in headers only these are read.
_ASSEMBLY_ATTRIBUTES = re.compile(r"(?:__)?(?:section|alias|symver|ifunc|weakref|visibility|target_clones)(?:__)?")


def _scan(source: _Source, *, headers: bool) -> list[Finding]:
    """Asm statements (not empty ones), asm labels that are not plain names and attribute strings that are not
    plain text in the kept lines of `source` (with `headers`, only the strings of attributes that reach the
    assembly)."""
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
            found.append(Finding(file, line, _one_line(text.replace("\\n", "\n").replace("\\t", " ")) or "asm label",
                                 None if is_label else text))
    for match in _ATTRIBUTE_START.finditer(source.code):
        opening = match.end() - 1
        closing = _matching(source.code, opening)
        for start, text in source.literals_with_starts(opening, closing):
            if _PLAIN_ATTRIBUTE_TEXT.fullmatch(text):
                continue
            before = source.code[opening:start]
            name = _LAST_WORD.search(before[:before.rfind("(")].rstrip())  # the attribute the string is given to
            if headers and not (name and _ASSEMBLY_ATTRIBUTES.fullmatch(name.group())):
                continue
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


# Where a literal can begin: a raw string's prefix (not inside a longer word), or a quote.
_LITERAL_START = re.compile(r'(?<!\w)(?:u8|[uUL])?R"(?P<delimiter>[^()\\\s]{0,16})\(|["\']')


def _blank_literals(text: str) -> tuple[str, list[tuple[int, int, str]]]:
    """`text` with the contents of string and character literals blanked (newlines kept), and each string
    literal as (start, end, contents as written). The preprocessed headers are a megabyte: the search jumps
    from one literal's start to the next (a character loop took most of the host-code check's time)."""
    chars = list(text)
    literals = []
    i, n = 0, len(text)
    while (start := _LITERAL_START.search(text, i)) is not None:
        i = start.start()
        if start["delimiter"] is not None:  # a raw string
            delimiter = start["delimiter"]
            close = text.find(f'){delimiter}"', start.end())
            end = n if close < 0 else close + len(delimiter) + 2
            literals.append((i, end, text[start.end():max(start.end(), end - len(delimiter) - 2)]))
            _blank(chars, start.end(), end - 1)
        else:
            quote, j = text[i], i + 1
            while j < n and text[j] != quote and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            end = min(j + 1, n)
            if quote == '"':
                literals.append((i, end, text[i + 1:end - 1]))
            _blank(chars, i + 1, end - 1)
        i = end
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
@dataclass(frozen=True)
class _Policy:
    """What the code of one kind of toolchain function may do: the imports it may call (never a definition of
    the candidate's under their names), the functions it may run and what they may do in turn (`follows`),
    the symbols it may name at all (`names`, None: any data, and functions held to `operand_policy`), and the
    registrations at exit it may make (one each)."""

    what: str
    calls: frozenset[str]
    follows: Callable[[str], bool]
    names: frozenset[str] | None = None
    operand_policy: str = "launcher"


_NVCC_CONSTRUCTORS = frozenset({"_ZL24__sti____cudaRegisterAllv", "__sti____cudaRegisterAll"})
# The functions of nvcc's header the registration runs or hands to atexit.
_NVCC_HELPERS = frozenset({"_ZL31__nv_cudaEntityRegisterCallbackPPv", "_ZL22____nv_dummy_param_refPv",
                           "_ZL32__nv_init_managed_rt_with_modulePPv", "_ZL26__cudaUnregisterBinaryUtilv"})
# What only nvcc's registration names when it calls its callback through a pointer (without optimisation, as
# `#pragma GCC optimize("O0")` compiles it): its fatbinary, its handle, its own functions and imports.
_NVCC_OWN_DATA = frozenset({"_ZL15__fatDeviceText", "_ZL20__cudaFatCubinHandle"})
_INITIALISER_PREFIX = "_GLOBAL__sub_I_"
# The suffixes of GCC's clones of a function (`f.isra.0`, `f.constprop.1`, `f.part.0`, `f.cold`): one function.
_CLONE_SUFFIX = re.compile(r"(?:\.(?:isra|constprop|part|cold|lto_priv)(?:\.\d+)?)+$")
_REGISTER_ONCE = frozenset({"atexit", "__cxa_atexit"})  # registering more than the toolchain's own is exit-time code
_POLICIES = {
    # nvcc's registration: the runtime's registration calls and atexit; it names the kernels' host functions
    # (registered, never called), which must be what nvcc makes them: launchers.
    "registration": _Policy(
        "nvcc's kernel registration",
        frozenset({"__cudaRegisterFatBinary", "__cudaRegisterFatBinaryEnd", "__cudaUnregisterFatBinary",
                   "__cudaRegisterFunction", "__cudaRegisterVar", "__cudaRegisterManagedVar", "__cudaRegisterTexture",
                   "__cudaRegisterSurface", "__cudaInitModule", "atexit"}),
        _NVCC_HELPERS.__contains__),
    # A kernel's host function (nvcc's launch stub, inlined or not): pops the launch configuration and launches;
    # its array of argument pointers makes the stack protector check a canary (__stack_chk_fail aborts).
    "launcher": _Policy(
        "a kernel's launch stub named by nvcc's kernel registration",
        frozenset({"__cudaPopCallConfiguration", "__cudaGetKernel", "__cudaLaunchKernel", "__cudaLaunchKernel_helper",
                   "cudaLaunchKernel", "__cxa_guard_acquire", "__cxa_guard_release", "__cxa_guard_abort",
                   "_Unwind_Resume", "__stack_chk_fail"}),
        lambda name: "__device_stub__" in name or "__cudaLaunchKernel_helper" in name),
    # <iostream>'s initialiser before GCC 13 constructs std::ios_base::Init, registers its destructor and names
    # nothing else. Every function the compiler named as a translation unit's initialiser is held to it: the
    # object check lets one through only when its relocations are these.
    "initialiser": _Policy(
        "the initialiser of global objects",
        frozenset({"_ZNSt8ios_base4InitC1Ev", "__cxa_atexit"}),
        lambda name: False,
        frozenset({"_ZNSt8ios_base4InitC1Ev", "__cxa_atexit", "_ZStL8__ioinit", "_ZNSt8ios_base4InitD1Ev",
                   "__dso_handle"})),
}

# Every import the toolchain's load-time code and the launch stubs it names may call: a definition of one in the
# candidate's object (even a local label on an instruction's line, which this reading of the assembly misses)
# would take those calls (tools/symbols.py refuses it).
LOAD_TIME_CALLS = frozenset().union(*(policy.calls for policy in _POLICIES.values()))

_LABEL = re.compile(r"^(?P<name>[A-Za-z_.$][\w.$@]*):\s*$")
_SIZE = re.compile(r"^\s*\.size\s+(?P<name>[^,\s]+)\s*,")
_SET = re.compile(r"^\s*\.(?:set|equiv|equ)\s+(?P<name>[^,\s]+)\s*,\s*(?P<target>[^\s]+)\s*$")
_FUNCTION_TYPE = re.compile(r"^\s*\.type\s+(?P<name>[^,\s]+)\s*,\s*[@%](?:function|gnu_indirect_function)\s*$")
_COMMON = re.compile(r"^\s*\.(?:comm|lcomm)\s+(?P<name>[^,\s]+)\s*,")
_INSTRUCTION = re.compile(r"^\s+(?P<op>[a-z][a-z0-9]*)\b\s*(?P<args>.*)$")
_OPERAND_SYMBOL = re.compile(r"(?<![%\w.$])(?P<name>[A-Za-z_.][\w.$]*)(?:@\w+)?")
_PREFIXES = frozenset({"rep", "repe", "repz", "repne", "repnz", "lock", "notrack", "bnd", "data16"})
_X86_REGISTER = re.compile(r"%[re]?(?:ax|bx|cx|dx|si|di|sp|bp|ip)\b|%r\d+")


@dataclass
class _Assembly:
    """The functions of an assembly file: each label's instructions (mnemonic, operands) up to its `.size` or
    the next label that is not local (`.L`), the local labels inside each, the aliases `.set` makes, and the
    labels typed as functions. A local label outside every function starts code of its own: the compiler puts
    none there, but a candidate's function named `.L...` by an asm label is one, hidden from the object's
    symbols."""

    bodies: dict[str, list[tuple[str, str]]]
    aliases: dict[str, str]
    functions: set[str]
    common: set[str]  # data defined by `.comm` or `.lcomm` (zero-initialised, no label)
    local_labels: dict[str, set[str]]  # per function (its clones, `f.cold`, with it), the `.L` labels inside it

    def resolve(self, name: str) -> str:
        for _ in range(len(self.aliases) + 1):
            if name in self.bodies or name not in self.aliases:
                break
            name = self.aliases[name]
        return name

    def defines(self, name: str) -> bool:
        return name in self.bodies or name in self.aliases or name in self.common


def load_time_calls(assembly: str) -> list[str]:
    """What nvcc's registration constructor and any translation-unit initialiser (`_GLOBAL__sub_I_...`) do
    beyond their own job, one line each: a call of anything but their allowlisted imports (or of a definition
    of the candidate's under such a name), an indirect call or jump, atexit or __cxa_atexit more than once,
    a function named that is not a kernel's launch stub, and in an initialiser any symbol but <iostream>'s.
    Empty for assembly that is not x86-64 (its syntax is not read here)."""
    if not _X86_REGISTER.search(assembly):
        return []
    parsed = _parse(assembly)
    problems: list[str] = []
    for name in sorted(parsed.bodies.keys() | parsed.aliases.keys()):
        if name in _NVCC_CONSTRUCTORS:
            problems += _misdeeds(name, "registration", parsed)
        elif name.startswith(_INITIALISER_PREFIX) and ".cold" not in name:
            problems += _misdeeds(name, "initialiser", parsed)
    return list(dict.fromkeys(problems))


def _parse(assembly: str) -> _Assembly:
    parsed = _Assembly({}, {}, set(), set(), {})
    current: list[tuple[str, str]] | None = None
    current_name = ""
    for line in assembly.splitlines():
        if label := _LABEL.match(line):
            if label["name"].startswith(".L") and current is not None:
                parsed.local_labels.setdefault(_CLONE_SUFFIX.sub("", current_name), set()).add(label["name"])
            else:
                current_name = label["name"]
                current = parsed.bodies.setdefault(current_name, [])
        elif alias := _SET.match(line):
            parsed.aliases[alias["name"]] = alias["target"]
        elif typed := _FUNCTION_TYPE.match(line):
            parsed.functions.add(typed["name"])
        elif common := _COMMON.match(line):
            parsed.common.add(common["name"])
        elif _SIZE.match(line):
            current = None
        elif (instruction := _INSTRUCTION.match(line)) and current is not None:
            op, args = instruction["op"], instruction["args"].split("#", 1)[0].strip()
            while op in _PREFIXES and args:  # `notrack jmp *%rax`, `rep stosq`: the instruction is what follows
                op, _, args = args.partition(" ")
                op, args = op.strip(), args.strip()
            current.append((op, args))
    return parsed


def _misdeeds(root: str, root_kind: str, parsed: _Assembly) -> list[str]:
    """What the code reachable from `root` does beyond what its policy (and those of the functions it runs or
    names) allows."""
    problems: list[str] = []
    registered: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    pending = [(root, root_kind)]
    while pending:
        name, kind = pending.pop()
        policy = _POLICIES[kind]
        name = parsed.resolve(name)
        if (name, kind) in seen:
            continue
        seen.add((name, kind))
        if name not in parsed.bodies:
            problems.append(f"{policy.what} runs {name}, whose code the assembly does not show")
            continue
        indirect_allowed = kind == "registration" and name in _NVCC_CONSTRUCTORS and all(
            _CLONE_SUFFIX.sub("", match["name"]) in _NVCC_OWN_DATA | _NVCC_HELPERS | policy.calls
            for _, args in parsed.bodies[name] for match in _OPERAND_SYMBOL.finditer(args)
            if not match["name"].startswith(".L"))
        for op, args in parsed.bodies[name]:
            transfer = op.startswith(("j", "call"))
            if transfer and args.startswith("*"):
                if not indirect_allowed:
                    problems.append(f"{policy.what} calls through a pointer ({op} {args})")
                continue
            for match in _OPERAND_SYMBOL.finditer(args):
                symbol = match["name"]
                if not symbol.startswith(".L"):
                    problems += _judge(symbol, transfer, kind, parsed, seen, pending, registered)
                elif (symbol not in parsed.local_labels.get(_CLONE_SUFFIX.sub("", name), set())
                      and (transfer or parsed.bodies.get(symbol))):
                    problems.append(f"{policy.what} {'runs' if transfer else 'names'} code outside its own "
                                    f"under a local label ({op} {args})")
    what = _POLICIES[root_kind].what
    problems += [f"{what} registers {count} functions with {symbol}" for symbol, count in sorted(registered.items())
                 if symbol in _REGISTER_ONCE and count > 1]
    return problems


def _judge(symbol: str, transfer: bool, kind: str, parsed: _Assembly, seen: set[tuple[str, str]],
           pending: list[tuple[str, str]], registered: dict[str, int]) -> list[str]:
    """The problem with one symbol an instruction of a `kind` function names (a call when `transfer`), if any;
    a function it may run is added to `pending`, an allowed import it calls counted in `registered`."""
    policy = _POLICIES[kind]
    if policy.names is not None and symbol not in policy.names:
        return [f"{policy.what} {'calls' if transfer else 'uses'} {symbol}"]
    if symbol in policy.calls:
        if parsed.defines(symbol):
            return [f"{policy.what} calls the candidate's own {symbol}"]
        if transfer:
            registered[symbol] = registered.get(symbol, 0) + 1
        return []
    if policy.names is not None:  # a listed name that is not a call
        return []
    is_function = transfer or parsed.resolve(symbol) in parsed.functions
    clone_of_seen = any(_CLONE_SUFFIX.sub("", symbol) == _CLONE_SUFFIX.sub("", name) for name, _ in seen)
    if is_function and (policy.follows(_CLONE_SUFFIX.sub("", symbol)) or clone_of_seen):
        pending.append((symbol, kind))
    elif transfer:
        return [f"{policy.what} calls {symbol}"]
    elif is_function:
        pending.append((symbol, policy.operand_policy))
    elif not parsed.defines(symbol):
        return [f"{policy.what} uses {symbol}"]
    return []
