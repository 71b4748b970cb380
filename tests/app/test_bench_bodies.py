"""The gateway benchmark's load never repeats a call: each body is valid JSON whose prompt carries its own
number, so a gateway that remembers repeated calls (the router's score cache) is measured on new ones."""

from __future__ import annotations

import json

from bench.gateway_overhead.common import PROMPT, NumberedBodies


def test_each_body_is_the_request_with_a_prompt_no_earlier_call_sent() -> None:
    bodies = NumberedBodies("bench-model", stream=True)
    sent = [json.loads(bodies()) for _ in range(50)]
    prompts = [body["messages"][0]["content"] for body in sent]
    assert len(set(prompts)) == 50
    assert all(prompt.startswith(PROMPT) for prompt in prompts)
    assert sent[0]["stream"] is True and sent[0]["stream_options"] == {"include_usage": True}
    assert {body["model"] for body in sent} == {"bench-model"}
    assert "stream" not in json.loads(NumberedBodies("m", stream=False)())
