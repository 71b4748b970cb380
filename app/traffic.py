"""Sends the demo calls through the running gateway with the real openai SDK."""

from __future__ import annotations

from collections.abc import Iterator

import openai

from app.demo import demo_calls
from routing.services import api_key_create, api_key_revoke


def send_demo_traffic(base_url: str) -> Iterator[str]:
    """Yields one line per call. Uses a short-lived key of its own, revoked at the end."""
    key, raw = api_key_create(name="demo-traffic")
    client = openai.OpenAI(base_url=base_url, api_key=raw, max_retries=0, timeout=300)
    try:
        for body in demo_calls():
            task = body["metadata"]["task"]
            try:
                raw_resp = client.chat.completions.with_raw_response.create(**body)
            except openai.APIError as exc:
                yield f"{task}: error {exc}"
                continue
            content = (raw_resp.parse().choices[0].message.content or "").strip().replace("\n", " ")
            h = raw_resp.headers
            yield (
                f"{task}: route={h['x-skillgate-route']} served_by={h['x-skillgate-served-by']} "
                f"verdict={h['x-skillgate-verdict']} cost=${h['x-skillgate-cost-usd']} "
                f"answer={content[:60]!r}"
            )
    finally:
        api_key_revoke(api_key=key)
