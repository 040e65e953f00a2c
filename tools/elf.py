"""A small reader of 64-bit little-endian ELF files (what nvcc writes on x86-64 and AArch64 Linux): sections,
symbols and the relocations of a section, read from the bytes themselves, so that a check of a candidate's
object depends on what the file holds, not on how a tool prints it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from kernelblaster.tools.errors import UserFacingError

# Section types (elf.h).
SHT_NULL = 0
SHT_PROGBITS = 1
SHT_SYMTAB = 2
SHT_STRTAB = 3
SHT_RELA = 4
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_DYNSYM = 11
SHT_INIT_ARRAY = 14
SHT_FINI_ARRAY = 15
SHT_PREINIT_ARRAY = 16
SHT_GROUP = 17
SHT_SYMTAB_SHNDX = 18
SHT_X86_64_UNWIND = 0x70000001  # what some assemblers call x86-64's .eh_frame
# Section flags.
SHF_WRITE = 0x1
SHF_ALLOC = 0x2
SHF_EXECINSTR = 0x4
# Symbol types and bindings.
STT_OBJECT = 1
STT_FUNC = 2
STT_SECTION = 3
STT_COMMON = 5
STT_TLS = 6
STT_GNU_IFUNC = 10
STB_LOCAL = 0
SHN_UNDEF = 0
EM_X86_64 = 62
# x86-64 relocations relative to the place they patch, whose addend is the target's offset minus the 4 bytes
# of the displacement (PC32, PLT32, GOTPCREL, GOTPCRELX, REX_GOTPCRELX).
_X86_64_PC_RELATIVE = frozenset({2, 4, 9, 41, 42})

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    offset: int
    size: int
    link: int
    info: int  # for a relocation section: the index of the section it applies to
    flags: int = 0


@dataclass(frozen=True)
class Symbol:
    name: str
    type: int
    binding: int
    section: int  # SHN_UNDEF for a symbol the file needs from elsewhere
    value: int
    size: int = 0

    @property
    def defined(self) -> bool:
        return self.section != SHN_UNDEF


@dataclass(frozen=True)
class Relocation:
    offset: int
    symbol: Symbol
    addend: int
    type: int = 0


class ElfFile:
    """The sections, symbol tables and relocations of one ELF file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._data = path.read_bytes()
        except OSError as error:
            raise UserFacingError(f"cannot read {path}: {error.strerror or error}") from None
        if len(self._data) < _HEADER.size or self._data[:4] != b"\x7fELF" or self._data[4:6] != b"\x02\x01":
            raise UserFacingError(f"{path} is not a 64-bit little-endian ELF file")
        header = _HEADER.unpack_from(self._data)
        self.machine = header[2]
        shoff, shentsize, shnum, shstrndx = header[6], header[11], header[12], header[13]
        raw = [_SECTION.unpack_from(self._data, shoff + i * shentsize) for i in range(shnum)]
        names_offset = raw[shstrndx][4] if shstrndx < len(raw) else 0
        self.sections = [Section(i, self._string(names_offset, s[0]), s[1], s[4], s[5], s[6], s[7], s[2])
                         for i, s in enumerate(raw)]
        self._symbols: dict[int, list[Symbol]] = {}

    def _string(self, table_offset: int, at: int) -> str:
        start = table_offset + at
        end = self._data.find(b"\0", start)
        return self._data[start:end if end >= 0 else len(self._data)].decode(errors="replace")

    def symbols(self, dynamic: bool = False) -> list[Symbol]:
        """The static symbol table (`.symtab`), or the dynamic one (`.dynsym`) with `dynamic`."""
        wanted = SHT_DYNSYM if dynamic else SHT_SYMTAB
        table = next((s for s in self.sections if s.type == wanted), None)
        return self._table(table.index) if table is not None else []

    def _table(self, index: int) -> list[Symbol]:
        if index not in self._symbols:
            table = self.sections[index]
            strings = self.sections[table.link].offset
            entries = [_SYMBOL.unpack_from(self._data, table.offset + k * _SYMBOL.size)
                       for k in range(table.size // _SYMBOL.size)]
            self._symbols[index] = [Symbol(self._string(strings, e[0]), e[1] & 0xF, e[1] >> 4, e[3], e[4], e[5])
                                    for e in entries]
        return self._symbols[index]

    def relocations(self, section: Section) -> list[Relocation]:
        """The relocations that apply to `section` (its `.rela` sections)."""
        found = []
        for rela in (s for s in self.sections if s.type == SHT_RELA and s.info == section.index):
            symbols = self._table(rela.link)
            for k in range(rela.size // _RELA.size):
                offset, info, addend = _RELA.unpack_from(self._data, rela.offset + k * _RELA.size)
                found.append(Relocation(offset, symbols[info >> 32], addend, info & 0xFFFFFFFF))
        return found

    def target(self, relocation: Relocation) -> str:
        """The name of what a relocation refers to: its symbol, or, for a section symbol, the function or object
        defined where it points (empty when none is)."""
        symbol = relocation.symbol
        if symbol.type != STT_SECTION:
            return symbol.name
        offset = relocation.addend
        if self.machine == EM_X86_64 and relocation.type in _X86_64_PC_RELATIVE:
            offset += 4
        return next((s.name for s in self.symbols() if s.section == symbol.section and s.type in (STT_FUNC, STT_OBJECT)
                     and s.value <= offset < s.value + max(s.size, 1)), "")

    def function_at(self, section: int, value: int) -> Symbol | None:
        """The function symbol defined at `value` in section `section`, if the symbol table names one."""
        return next((s for s in self.symbols() if s.section == section and s.value == value
                     and s.type in (STT_FUNC, STT_GNU_IFUNC)), None)
