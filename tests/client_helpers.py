"""What the real-client tests (tests/clients/test_clients_*.py) check after a client's flow: one
charged ledger row per provider call, matched to the calls by the provider's answer ids."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from licensing.models import Transaction
from tests.kit import wait_for_ledger

# Weather for the tool loops: the tool the clients declare, the argument the schema asks for.
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


class Forecast(BaseModel):
    """The structured output the clients' tests ask for."""

    city: str
    temperature_c: int
    sunny: bool


def weather_report(city: str) -> str:
    return f"Sunny and 21 degrees in {city}."


def ledger_rows(count: int, timeout: float = 10.0) -> list[Transaction]:
    """The ledger's rows, oldest first, once `count` are there: a stream's row is written by a
    task of its own just after the stream ends, so the client may be done before it lands."""
    wait_for_ledger(count, timeout)
    return list(Transaction.objects.order_by("created_at", "id"))


def assert_charged(
    count: int, service: str, *, answer_ids=None, model: str | None = None
) -> list[Transaction]:
    """Exactly `count` ledger rows, each a successful provider call of `service`, charged; with
    `answer_ids`, one row per provider answer the client received (the rows' answer ids)."""
    rows = ledger_rows(count)
    assert len(rows) == count, [(r.service, r.status_code, r.error_code) for r in rows]
    for row in rows:
        assert (row.service, row.status_code, row.outcome) == (service, 200, "success"), (
            row.service,
            row.status_code,
            row.error_code,
            row.error_message,
        )
        assert row.credits > 0 and row.wallet_id is not None, row
        if model is not None:
            assert row.billed_model == model
    if answer_ids is not None:
        assert sorted(row.upstream_id for row in rows) == sorted(answer_ids)
    return rows


def provider_calls(fake, path: str) -> list[dict]:
    """The JSON bodies the fake provider received on `path` (e.g. `/v1/responses`)."""
    return [request.json for request in fake.requests if request.path == path]


def valid_weather_args(arguments: str | dict) -> dict:
    """A tool call's arguments, checked against WEATHER_SCHEMA."""
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    assert set(args) == {"city"} and isinstance(args["city"], str), args
    return args


def agents_sdk():
    """The OpenAI Agents SDK (`openai-agents`, the `clients` extra) with its tracing off (nothing
    leaves 127.0.0.1). A test that calls this is skipped where the extra is not installed, so a
    `.[dev]` environment still collects and runs the rest of its module."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    return agents


def weather_tool(cities: list[str], reply: str):
    """The Agents SDK's `get_weather` function tool, the one every fake upstream calls: it
    records the city it is called for in `cities` and answers `reply` (with `{city}`)."""
    function_tool = agents_sdk().function_tool

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        cities.append(city)
        return reply.format(city=city)

    return get_weather
