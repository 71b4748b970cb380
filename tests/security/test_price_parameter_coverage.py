"""Every price-changing parameter of the three APIs is priced, refused, or never reaches a provider
(issue 37, class 3).

Priced ones (service tiers, audio, web search, prediction, ``n``, prompt-cache markers) have their own
tests (test_billing_parameters.py, test_tool_cache_markers.py). The rest of what the providers bill
differently is either refused with a 400 naming it before any upstream call (it has no place in the
gateway's call, so accepting it would ask for a service that is never given), or accepted and not
forwarded, so the provider bills the call as an ordinary one and the charge is the ordinary charge:

- ``/v1/messages``: ``service_tier``, ``speed: "fast"`` (billed at a premium), ``inference_geo`` (a
  regional multiplier), ``thinking`` (its budget is billed as output), ``container`` (code execution
  hours) and ``mcp_servers`` (the MCP connector's tool calls);
- ``/v1/responses``: ``prompt_cache_retention`` (the same price for both policies, OpenAI says; not
  sent either way) and the hosted tools (web search, code interpreter: fees per call).

Refused: chat's ``best_of`` and ``prompt_cache_retention``, an Anthropic server tool (no
``input_schema``: web search's fee per search).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.models import Invocation
from tests.factories import make_key
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
BASE = {
    "/v1/chat/completions": {"model": "auto", "messages": HELLO, "max_tokens": 20},
    "/v1/messages": {"model": "auto", "messages": HELLO, "max_tokens": 20},
    "/v1/responses": {"model": "auto", "input": "hi", "max_output_tokens": 20},
}

UNFORWARDED: dict[str, tuple[str, dict[str, Any]]] = {
    "messages.service_tier": ("/v1/messages", {"service_tier": "auto"}),
    "messages.speed": ("/v1/messages", {"speed": "fast"}),
    "messages.inference_geo": ("/v1/messages", {"inference_geo": "us"}),
    "messages.thinking": ("/v1/messages", {"thinking": {"type": "enabled", "budget_tokens": 64000}}),
    "messages.container": ("/v1/messages", {"container": "container_1"}),
    "messages.mcp_servers": (
        "/v1/messages",
        {"mcp_servers": [{"type": "url", "url": "http://127.0.0.1:9/mcp", "name": "billed-elsewhere"}]},
    ),
    "responses.prompt_cache_retention": ("/v1/responses", {"prompt_cache_retention": "24h"}),
    "responses.hosted_tools": (
        "/v1/responses",
        {"tools": [{"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}}]},
    ),
}

REFUSED: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat.best_of": ("/v1/chat/completions", {"best_of": 4}, "best_of"),
    "chat.prompt_cache_retention": (
        "/v1/chat/completions",
        {"prompt_cache_retention": "24h"},
        "prompt_cache_retention",
    ),
    "messages.server_tool": (
        "/v1/messages",
        {"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]},
        "tools.0",
    ),
}


def post(gateway_url: str, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", "x-api-key": key}
    return httpx.post(f"{gateway_url}{path}", json=body, headers=headers, timeout=60)


def charged(count: int) -> list[Invocation]:
    def rows() -> list[Invocation] | None:
        found = list(Invocation.objects.order_by("id"))
        return found if len(found) >= count else None

    result = wait_until(rows, timeout=20, what=f"{count} ledger rows")
    assert result is not None
    return result


@pytest.mark.parametrize("case", sorted(UNFORWARDED))
def test_an_unforwarded_price_parameter_never_reaches_the_provider_and_costs_the_ordinary_call(
    gateway_url, backends, stub, case
):
    path, fields = UNFORWARDED[case]
    stub.responder = lambda body: Reply(content="ok")
    key = make_key().raw
    plain = post(gateway_url, key, path, BASE[path])
    assert plain.status_code == 200, plain.text
    response = post(gateway_url, key, path, {**BASE[path], **fields})
    assert response.status_code == 200, response.text
    ordinary, with_field = stub.requests
    assert ordinary == with_field  # the provider is asked for the same ordinary call
    for name in fields:
        assert name not in json.dumps(with_field)
    first, second = charged(2)
    assert first.cost_usd == second.cost_usd > 0


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_price_parameter_with_no_place_in_the_call_is_a_400_naming_it(gateway_url, backends, stub, case):
    path, fields, named = REFUSED[case]
    response = post(gateway_url, make_key().raw, path, {**BASE[path], **fields})
    assert response.status_code == 400, response.text
    assert named in response.json()["error"]["message"], response.text
    assert stub.requests == [] and not Invocation.objects.exists()
