"""Round three's new price-changing parameters (issue 37, class 3; h37's probes, beside
test_price_parameter_coverage.py): each is refused with a 400 naming it before any upstream call,
dropped so the provider bills an ordinary call, or forwarded under the gateway's own output cap
(reasoning is billed as output, within ``max_tokens``). None of the 37 probes got through.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.support.openai_stub import Reply
from routing.models import Invocation
from tests.factories import make_key
from tests.security.test_price_parameter_coverage import BASE, post

pytestmark = pytest.mark.django_db(transaction=True)

CHAT, MESSAGES, RESPONSES = "/v1/chat/completions", "/v1/messages", "/v1/responses"
REFUSED: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat.reasoning": (CHAT, {"reasoning": {"effort": "high"}}, "reasoning"),
    "chat.thinking": (CHAT, {"thinking": {"type": "enabled", "budget_tokens": 60000}}, "thinking"),
    "chat.extra_body": (CHAT, {"extra_body": {"service_tier": "priority"}}, "extra_body"),
    "chat.hosted_web_search": (CHAT, {"tools": [{"type": "web_search"}]}, "tools[0].type"),
    "chat.custom_tool": (CHAT, {"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type"),
    "messages.bash_tool": (MESSAGES, {"tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools.0"),
    "messages.code_execution": (
        MESSAGES,
        {"tools": [{"type": "code_execution_20250522", "name": "code_execution"}]},
        "tools.0",
    ),
    "messages.no_max_tokens": (MESSAGES, {"max_tokens": None}, "max_tokens"),
    "messages.huge_max_tokens": (MESSAGES, {"max_tokens": 10**9}, "max_tokens"),
    "responses.background": (RESPONSES, {"background": True}, "background"),
    "responses.conversation": (RESPONSES, {"conversation": "conv_1"}, "conversation"),
    "responses.prompt": (RESPONSES, {"prompt": {"id": "pmpt_1"}}, "prompt"),
}
DROPPED: dict[str, tuple[str, dict[str, Any]]] = {
    "chat.store": (CHAT, {"store": True}),
    "chat.verbosity": (CHAT, {"verbosity": "high"}),
    "messages.context_management": (MESSAGES, {"context_management": {"edits": []}}),
    "messages.adaptive_thinking": (MESSAGES, {"thinking": {"type": "adaptive"}}),
    "messages.top_k": (MESSAGES, {"top_k": 5}),
    "responses.file_search": (RESPONSES, {"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}),
    "responses.image_generation": (RESPONSES, {"tools": [{"type": "image_generation"}]}),
    "responses.mcp": (
        RESPONSES,
        {"tools": [{"type": "mcp", "server_label": "x", "server_url": "http://127.0.0.1:9/mcp"}]},
    ),
    "responses.computer_use": (
        RESPONSES,
        {
            "tools": [
                {
                    "type": "computer_use_preview",
                    "display_width": 1,
                    "display_height": 1,
                    "environment": "browser",
                }
            ]
        },
    ),
    "responses.include": (RESPONSES, {"include": ["file_search_call.results"]}),
    "responses.top_logprobs": (RESPONSES, {"top_logprobs": 20}),
    "responses.max_tool_calls": (RESPONSES, {"max_tool_calls": 50}),
    "responses.no_max_output_tokens": (RESPONSES, {"max_output_tokens": None}),
}
CAPPED: dict[str, tuple[str, dict[str, Any]]] = {
    "chat.reasoning_effort": (CHAT, {"reasoning_effort": "high"}),
    "chat.logprobs": (CHAT, {"logprobs": True, "top_logprobs": 20}),
    "chat.no_max_tokens": (CHAT, {"max_tokens": None}),
    "messages.effort": (MESSAGES, {"output_config": {"effort": "high"}}),
    "responses.reasoning": (RESPONSES, {"reasoning": {"effort": "high"}}),
}
ORDINARY = {"model", "messages", "max_tokens"}


def _body(path: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in {**BASE[path], **fields}.items() if v is not None}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_parameter_with_no_place_is_a_400_naming_it(gateway_url, backends, stub, case):
    path, fields, named = REFUSED[case]
    response = post(gateway_url, make_key().raw, path, _body(path, fields))
    assert response.status_code == 400, response.text
    assert named in response.text
    assert stub.requests == [] and not Invocation.objects.exists()


@pytest.mark.parametrize("case", sorted(DROPPED))
def test_a_dropped_parameter_leaves_the_provider_an_ordinary_call(gateway_url, backends, stub, case):
    path, fields = DROPPED[case]
    stub.responder = lambda body: Reply(content="ok")
    response = post(gateway_url, make_key().raw, path, _body(path, fields))
    assert response.status_code == 200, response.text
    [sent] = stub.requests
    assert set(sent) == ORDINARY, sorted(sent)


@pytest.mark.parametrize("case", sorted(CAPPED))
def test_a_forwarded_parameter_stays_under_the_gateways_output_cap(gateway_url, backends, stub, case):
    path, fields = CAPPED[case]
    stub.responder = lambda body: Reply(content="ok")
    response = post(gateway_url, make_key().raw, path, _body(path, fields))
    assert response.status_code == 200, response.text
    [sent] = stub.requests
    assert isinstance(sent.get("max_tokens"), int) and sent["max_tokens"] > 0
    if "max_tokens" in fields or "max_output_tokens" in fields:
        return
    assert sent["max_tokens"] <= 20  # the caller's own cap; reasoning tokens are output within it
