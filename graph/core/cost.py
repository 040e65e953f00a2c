"""What LLM tokens cost: prices per model (from `--price MODEL=IN,OUT[,CACHED]` or a TOML file), applied to
the token usage of a run. Prices are the user's (they change too often to ship); a model without one is
reported as unpriced rather than guessed.

A prices file, in US dollars per million tokens (`cached_input` is optional; without it cached prompt
tokens cost as much as the others):

    [prices."gpt-4.1"]
    input = 2.00
    output = 8.00
    cached_input = 0.50
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.files import read_text_file

PER_MILLION = 1_000_000


class ModelPrice(BaseModel):
    """US dollars per million tokens of one model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0, description="Per million prompt tokens")
    output: float = Field(ge=0, description="Per million completion tokens (reasoning included)")
    cached_input: float | None = Field(default=None, ge=0, description="Per million cached prompt tokens")


class PricedUsage(Protocol):
    """Tokens of one answer (`graph.core.state.TokenUsage`), as far as pricing needs them."""

    @property
    def model(self) -> str: ...

    @property
    def input_tokens(self) -> int: ...

    @property
    def cached_input_tokens(self) -> int: ...

    @property
    def output_tokens(self) -> int: ...


class Cost(BaseModel):
    """Money spent on the priced tokens, and the models that had no price."""

    usd: float
    unpriced_models: list[str]

    def display(self) -> str:
        unpriced = f" + unpriced ({', '.join(self.unpriced_models)})" if self.unpriced_models else ""
        return f"${self.usd:.2f}{unpriced}"


def usage_cost(usage: Iterable[PricedUsage], prices: Mapping[str, ModelPrice]) -> Cost | None:
    """The cost of `usage` at `prices`; None when no prices were given at all."""
    if not prices:
        return None
    usd = 0.0
    unpriced: set[str] = set()
    for entry in usage:
        price = prices.get(entry.model)
        if price is None:
            if entry.input_tokens or entry.output_tokens:
                unpriced.add(entry.model or "unknown model")
            continue
        usd += answer_cost(entry, price)
    return Cost(usd=usd, unpriced_models=sorted(unpriced))


def answer_cost(usage: PricedUsage, price: ModelPrice) -> float:
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    cached_price = price.input if price.cached_input is None else price.cached_input
    return ((usage.input_tokens - cached) * price.input + cached * cached_price
            + usage.output_tokens * price.output) / PER_MILLION


def parse_price(text: str) -> tuple[str, ModelPrice]:
    """`MODEL=IN,OUT[,CACHED]` (US dollars per million tokens) as a model name and its price."""
    model, _, numbers = text.rpartition("=")
    parts = numbers.split(",")
    try:
        values = [float(part) for part in parts]
        if not model or len(values) not in (2, 3):
            raise ValueError(text)
        return model, ModelPrice(input=values[0], output=values[1],
                                 cached_input=values[2] if len(values) == 3 else None)
    except (ValueError, ValidationError):
        raise UserFacingError(f"--price {text}: expected MODEL=IN,OUT[,CACHED] in US dollars per million tokens, "
                              "e.g. gpt-4.1=2,8,0.5") from None


class _PricesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prices: dict[str, ModelPrice]


def load_prices(path: Path) -> dict[str, ModelPrice]:
    """The `[prices."MODEL"]` tables of a TOML file."""
    text = read_text_file(path, "the prices file")
    try:
        return _PricesFile.model_validate(tomllib.loads(text)).prices
    except tomllib.TOMLDecodeError as error:
        raise UserFacingError(f"{path}: not valid TOML ({error})") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UserFacingError(f"{path}: {where}: {first['msg']} (expected [prices.\"MODEL\"] tables with "
                              "input, output and optionally cached_input, in US dollars per million tokens)"
                              ) from None
