"""Which problems a suite runs, in which order: a KernelBench-layout directory (`level1/19_ReLU.py` ...)
filtered by levels and problem numbers, or a text file listing problem files; the stated order or a
seeded shuffle. Nothing here loads a problem: a file that fails to load is the run's to report.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import read_text_file

Order = Literal["given", "shuffle"]
_LEVEL_DIR = re.compile(r"^level(\d+)$")
_NUMBERED = re.compile(r"^(\d+)_")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class SuiteProblem(BaseModel):
    """One problem of a suite: `id` names it in results and reports (`level1/19_ReLU`)."""

    id: str
    path: str
    level: int | None
    number: int | None

    @property
    def slug(self) -> str:
        """The id as one file-name-safe word."""
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", self.id).strip("-")


def parse_levels(text: str) -> list[int]:
    """`1,2` -> [1, 2]."""
    try:
        # int() refuses an empty item too, so `1,,2` is an error as `--problems 1,,2` is.
        return sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise UserFacingError(f"--level {text}: expected level numbers like 1,2") from None


MAX_RANGE = 100_000


def parse_ranges(text: str) -> set[int]:
    """`1-20,23` -> {1, ..., 20, 23}."""
    numbers: set[int] = set()
    for part in (part.strip() for part in text.split(",")):
        found = _RANGE.match(part)
        if found is None or (found.group(2) and int(found.group(2)) < int(found.group(1))):
            raise UserFacingError(f"--problems {text}: {part!r} is not a number or a range like 1-20")
        first, last = int(found.group(1)), int(found.group(2) or found.group(1))
        # Every number asked for must exist, so a range this long can only fail, after filling memory first.
        if last - first >= MAX_RANGE:
            raise UserFacingError(f"--problems {text}: {part!r} spans more than {MAX_RANGE:,} problem numbers")
        numbers.update(range(first, last + 1))
    return numbers


def select_problems(source: Path, levels: list[int] | None = None,
                    numbers: set[int] | None = None) -> list[SuiteProblem]:
    """The problems of `source` (a KernelBench-layout directory or a list file), in the stated order."""
    if source.is_dir():
        problems = _from_directory(source, levels, numbers)
    elif source.is_file():
        if levels is not None or numbers is not None:
            raise UserFacingError(f"{source}: --level and --problems select from a KernelBench directory, not a list")
        problems = _from_list(source)
    else:
        raise UserFacingError(f"{source}: no such directory or problem list")
    if not problems:
        raise UserFacingError(f"{source}: no problems found (expected level1/, level2/ ... with N_Name.py files, "
                              "or a text file listing problem files)")
    return problems


def ordered(problems: list[SuiteProblem], order: Order, seed: int) -> list[SuiteProblem]:
    if order == "given":
        return list(problems)
    shuffled = list(problems)
    random.Random(seed).shuffle(shuffled)
    return shuffled


def _from_directory(source: Path, levels: list[int] | None, numbers: set[int] | None) -> list[SuiteProblem]:
    available = {int(found.group(1)): entry for entry in source.iterdir()
                 if entry.is_dir() and (found := _LEVEL_DIR.match(entry.name))}
    if not available:
        return []
    unknown = sorted(set(levels or []) - set(available))
    if unknown:
        raise UserFacingError(f"--level {','.join(map(str, unknown))}: {source} has levels "
                              f"{', '.join(map(str, sorted(available)))}")
    chosen = [_numbered_files(available[level], level) for level in (levels or sorted(available))]
    problems = [problem for level_problems in chosen for problem in level_problems
                if numbers is None or problem.number in numbers]
    if numbers is not None:
        missing = sorted(numbers - {problem.number for problem in problems if problem.number is not None})
        if missing:
            raise UserFacingError(f"--problems: no problem numbered {_compact(missing)} in the chosen levels")
    return problems


def _numbered_files(directory: Path, level: int) -> list[SuiteProblem]:
    files = [(int(found.group(1)), path) for path in directory.glob("*.py")
             if (found := _NUMBERED.match(path.name))]
    return [SuiteProblem(id=f"level{level}/{path.stem}", path=str(path.resolve()), level=level, number=number)
            for number, path in sorted(files)]


def _from_list(source: Path) -> list[SuiteProblem]:
    problems = []
    for number, line in enumerate(read_text_file(source, "the list of problems").splitlines(), start=1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        path = (source.parent / entry).resolve()
        if not path.is_file():
            raise UserFacingError(f"{source}:{number}: {entry}: no such problem file")
        level = _LEVEL_DIR.match(path.parent.name)
        numbered = _NUMBERED.match(path.name)
        problem_id = f"{path.parent.name}/{path.stem}" if level else path.stem
        problems.append(SuiteProblem(id=problem_id, path=str(path), level=int(level.group(1)) if level else None,
                                     number=int(numbered.group(1)) if numbered else None))
    ids = [problem.id for problem in problems]
    repeated = sorted({problem_id for problem_id in ids if ids.count(problem_id) > 1})
    if repeated:
        raise UserFacingError(f"{source}: lists {', '.join(repeated)} more than once")
    return problems


def _compact(numbers: list[int]) -> str:
    return ", ".join(map(str, numbers[:10])) + (" ..." if len(numbers) > 10 else "")
