"""Command-line options as typed models: the one place where every command's flags are validated.

A command group (`harness.cli`, `kb.cli`, `graph.app.run_cli`, ...) exposes `add_commands(subparsers)` and
declares each command with `add_command`: an argparse parser whose flags keep their text (no `type=`),
each flag's `dest` the name of a field of the command's `Options` model, and a `run(options) -> int`.
`Command.__call__` validates the parsed flags into that model before `run` starts, so a bad value is one
line naming the flag, and nothing is created, written or run on a GPU before every flag is known good.

To add a flag: add a field to the command's model (or to `RunContext` for a run setting) with a type
below, and `parser.add_argument("--flag", dest="field", ...)`. Building parsers must import nothing heavy
(torch, LangGraph, Chroma): `run` functions import what they need when they run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Generic, NoReturn, TypeAlias, TypeVar
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import file_problem
from kernelblaster.tools.sanitizer import SanitizerTool


class UsageError(UserFacingError):
    """A command line argparse cannot read: an unknown flag, a missing argument, a bad choice."""


class CommandLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (usage stays behind `--help`)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


class Options(BaseModel):
    """Base of every command's options: its fields are the command's flags, by `dest`."""

    model_config = ConfigDict(frozen=True, extra="forbid")


OptionsT = TypeVar("OptionsT", bound=Options)
# Where a command group adds its commands (each a `CommandLineParser`, as the top parser is); a string, since
# argparse's class takes no type arguments at run time.
Subcommands: TypeAlias = "argparse._SubParsersAction[CommandLineParser]"


@dataclass(frozen=True)
class Command(Generic[OptionsT]):
    """A command: its parser (for naming flags in errors), its options model and what it does."""

    parser: argparse.ArgumentParser
    options: type[OptionsT]
    run: Callable[[OptionsT], int]

    def __call__(self, args: argparse.Namespace) -> int:
        return self.run(self.validate(args))

    def validate(self, args: argparse.Namespace) -> OptionsT:
        """The flags as the options model, or a one-line error naming the first bad flag."""
        flags = {action.dest: action for action in self.parser._actions if action.dest != argparse.SUPPRESS}
        given = {dest: getattr(args, dest) for dest in flags if getattr(args, dest, None) is not None}
        try:
            return self.options.model_validate(given)
        except ValidationError as error:
            raise UserFacingError(_describe(error, flags)) from None


def add_command(subparsers: Subcommands, name: str, *, help: str, options: type[OptionsT],
                run: Callable[[OptionsT], int]) -> CommandLineParser:
    """A sub-command `name`; add its flags to the parser returned."""
    parser = subparsers.add_parser(name, help=help, description=help)
    parser.set_defaults(command=Command(parser, options, run))
    return parser


def describe_settings_error(error: ValidationError) -> str:
    """One line for settings given by name (Studio's context form, Python keywords), as a bad flag gets one:
    the first bad setting, its value and what is wrong with it."""
    first = error.errors(include_url=False)[0]
    name = ".".join(str(part) for part in first["loc"])
    return f"{name}{_shown(first['input'])}: {_message(first)}" if name else _message(first)


def _describe(error: ValidationError, flags: dict[str, argparse.Action]) -> str:
    first = error.errors(include_url=False)[0]
    dest = next((part for part in reversed(first["loc"]) if isinstance(part, str) and part in flags), None)
    if dest is None:
        return _message(first)
    action = flags[dest]
    metavar = action.metavar if isinstance(action.metavar, str) else None  # a tuple names several values
    name = max(action.option_strings, key=len) if action.option_strings else (metavar or dest).upper()
    return f"{name}{_shown(first['input'])}: {_message(first)}"


def _message(error: ErrorDetails) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    return message[:1].lower() + message[1:]


def _shown(value: Any) -> str:
    return "" if not isinstance(value, str | int | float) else f" {value!r}" if value == "" else f" {value}"


def _comma_list(value: Any) -> Any:
    """`"0,1"` -> `["0", "1"]`, `""` -> `[]`; a list (from Python or a Studio form) passes unchanged."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return []
    parts = [part.strip() for part in value.split(",")]
    # `0,,1` or `cublas,` is a slip of the keyboard: skipping the gap could run with a list not meant.
    empty = next((number for number, part in enumerate(parts, 1) if not part), None)
    if empty is not None:
        raise ValueError(f"item {empty} is empty; separate items with single commas")
    return parts


def nested(values: Any, key: str, model: type[BaseModel]) -> Any:
    """Move the flags that are fields of `model` under `key` (for a `model_validator(mode="before")`), so one
    command's options can hold a settings model (`RunContext`) filled from flat flags."""
    if not isinstance(values, dict) or key in values:
        return values
    inner = {name: values[name] for name in model.model_fields if name in values}
    return {name: value for name, value in values.items() if name not in inner} | {key: inner}


def _key_value_pairs(value: Any) -> Any:
    """`["a=1", "b=2"]` (a repeated `--flag KEY=VALUE`) -> `{"a": "1", "b": "2"}`; a mapping passes unchanged."""
    if not isinstance(value, list | tuple):
        return value
    pairs = {}
    for item in value:
        key, separator, text = str(item).partition("=")
        if not (separator and key and text):
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        pairs[key] = text
    return pairs


def _no_repeats(values: tuple[Any, ...]) -> tuple[Any, ...]:
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"lists {', '.join(repeated)} more than once")
    return values


def _known_libraries(names: Iterable[str]) -> tuple[str, ...]:
    from kernelblaster.tools.symbols import LIBRARIES  # its patterns take a while to compile: only when asked

    known = sorted(library.name for library in LIBRARIES)
    lowered = tuple(name.lower() for name in names)
    unknown = [name for name in lowered if name not in known]
    if unknown:
        raise ValueError(f"unknown library {unknown[0]!r}; choose from {', '.join(known)}")
    return lowered


def _sanitizer_names(value: Any) -> Any:
    """`"memcheck,racecheck"` -> the checkers; a flag given with no names is a mistake, not "none"."""
    if isinstance(value, str) and not value.replace(",", "").strip():
        raise ValueError(f"name at least one checker: {', '.join(tool.value for tool in SanitizerTool)}")
    return _comma_list(value)


def _endpoint_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL such as http://127.0.0.1:8000/v1")
    return text


def _path_text(text: str) -> str:
    if not text.strip():
        raise ValueError("an empty path; leave the flag out to use the default")
    return text


def _readable_file(path: Path) -> Path:
    problem = file_problem(path)
    if problem is not None:
        raise ValueError(problem)
    return path


PositiveInt = Annotated[int, Field(ge=1)]
GpuIndex = Annotated[int, Field(ge=0)]
# Seconds a wait may last: NaN and infinity would mean "never time out", and waits far beyond a week overflow
# what the operating system's timers take (poll: 24.8 days in milliseconds).
MAX_WAIT_S = 7 * 24 * 3600.0
Seconds = Annotated[float, Field(gt=0, le=MAX_WAIT_S, allow_inf_nan=False)]
GpuIndices = Annotated[tuple[GpuIndex, ...], BeforeValidator(_comma_list), AfterValidator(_no_repeats),
                       Field(min_length=1)]
Libraries = Annotated[tuple[str, ...], BeforeValidator(_comma_list), AfterValidator(_known_libraries)]
# compute-sanitizer checkers, `--sanitize memcheck,racecheck`; empty: none.
SanitizerTools = Annotated[tuple[SanitizerTool, ...], BeforeValidator(_sanitizer_names), AfterValidator(_no_repeats)]
EndpointUrl = Annotated[str, AfterValidator(_endpoint_url)]
# A path kept as the text given (run.json and Studio store it so); never empty.
PathText = Annotated[str, AfterValidator(_path_text)]
ReadableFile = Annotated[Path, AfterValidator(_readable_file)]
# A mapping that a repeated `--flag KEY=VALUE` fills; annotate the dict type with it.
KEY_VALUE_PAIRS = BeforeValidator(_key_value_pairs)
