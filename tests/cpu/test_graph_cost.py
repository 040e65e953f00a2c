"""Cost: prices from `--price MODEL=IN,OUT[,CACHED]` or a TOML file, cached prompt tokens at their own price,
shown in the live progress and in every report; a model without a price is reported, never guessed."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fixtures.graph.fake_openai import FakeOpenAI, kernelblaster_roles, optimize_through

from kernelblaster.graph.core.cost import Cost, ModelPrice, load_prices, parse_price, usage_cost
from kernelblaster.graph.core.progress import Progress, ProgressDisplay, ProgressNote
from kernelblaster.graph.llm.usage import TokenUsage
from kernelblaster.tools.errors import UserFacingError

PRICE = ModelPrice(input=2.0, output=8.0, cached_input=0.5)


def _usage(model: str = "gpt-4.1", input_tokens: int = 0, cached: int = 0, output: int = 0) -> TokenUsage:
    return TokenUsage(role="lowering", node="lower", model=model, input_tokens=input_tokens,
                      cached_input_tokens=cached, output_tokens=output)


def test_a_price_flag_gives_input_output_and_cached_prices_per_million_tokens() -> None:
    assert parse_price("gpt-4.1=2,8,0.5") == ("gpt-4.1", PRICE)
    assert parse_price("Qwen/Qwen2.5-Coder-32B-Instruct=0.2,0.6") == (
        "Qwen/Qwen2.5-Coder-32B-Instruct", ModelPrice(input=0.2, output=0.6))


@pytest.mark.parametrize("text", ["gpt-4.1=2", "gpt-4.1", "=1,2", "gpt-4.1=a,b", "gpt-4.1=-1,2"])
def test_a_malformed_price_is_a_one_line_error_showing_the_form(text: str) -> None:
    with pytest.raises(UserFacingError, match="expected MODEL=IN,OUT") as error:
        parse_price(text)
    assert "\n" not in str(error.value)


def test_a_prices_file_gives_the_prices_of_several_models(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices."gpt-4.1"]\ninput = 2.0\noutput = 8.0\ncached_input = 0.5\n\n'
                      '[prices.o3]\ninput = 2\noutput = 8\n')
    assert load_prices(prices) == {"gpt-4.1": PRICE, "o3": ModelPrice(input=2, output=8)}


def test_a_prices_file_missing_a_price_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices."gpt-4.1"]\ninput = 2.0\n')
    with pytest.raises(UserFacingError, match=r"prices.toml: prices.gpt-4.1.output: Field required") as error:
        load_prices(prices)
    assert "\n" not in str(error.value)


def test_cached_prompt_tokens_cost_the_cached_price() -> None:
    cost = usage_cost([_usage(input_tokens=1_000_000, cached=400_000, output=100_000)], {"gpt-4.1": PRICE})
    assert cost is not None and cost.usd == pytest.approx(0.6 * 2 + 0.4 * 0.5 + 0.1 * 8)


def test_a_model_without_a_price_is_reported_as_unpriced_not_guessed() -> None:
    cost = usage_cost([_usage(input_tokens=1_000_000), _usage("mystery", input_tokens=5)], {"gpt-4.1": PRICE})
    assert cost == Cost(usd=2.0, unpriced_models=["mystery"])
    assert cost.display() == "$2.00 + unpriced (mystery)"


def test_a_prices_file_that_is_not_utf8_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_bytes(b'[prices."gpt-4.1"]\ninput = 2.0 # caf\xe9\noutput = 8.0\n')
    with pytest.raises(UserFacingError) as error:
        load_prices(prices)
    assert str(error.value) == f"{prices}: the prices file is not UTF-8 text (byte 36)"


def test_without_prices_there_is_no_cost() -> None:
    assert usage_cost([_usage(input_tokens=10)], {}) is None


def test_the_live_progress_shows_the_cost_so_far() -> None:
    out = io.StringIO()
    ProgressDisplay(out).show(Progress(note=ProgressNote(node="lower", text="applied"), best_speedup=1.5,
                                       tokens=2500, cost=Cost(usd=0.4217, unpriced_models=[])))
    assert "2.5k tokens, $0.42)" in out.getvalue()


def test_a_run_reports_its_cost_per_role_and_in_all_counting_cached_prompt_tokens(tmp_path: Path) -> None:
    shown: list[Progress] = []
    with FakeOpenAI(kernelblaster_roles) as server:
        optimize_through(server, tmp_path, depth=2, prices={"gpt-4.1": PRICE}, on_progress=shown.append)
    records = [json.loads(line) for line in (tmp_path / "run" / "llm.jsonl").read_text().splitlines()]
    expected = usage_cost([TokenUsage.model_validate(r["usage"]) for r in records], {"gpt-4.1": PRICE})
    assert expected is not None and any(r["usage"]["cached_input_tokens"] for r in records)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["cost"]["usd"] == pytest.approx(expected.usd)
    assert sum(total["cost_usd"] for total in report["tokens"]) == pytest.approx(expected.usd)
    assert f"costing ${expected.usd:.2f}" in (tmp_path / "run" / "report.md").read_text()
    assert shown[-1].cost is not None and shown[-1].cost.usd == pytest.approx(expected.usd)
