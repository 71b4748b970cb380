"""Sends the demo calls through the running gateway with the real openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import openai

from app.demo import demo_calls
from core.money import money_display
from routing import scopes
from routing.services import api_key_create, api_key_revoke


@contextmanager
def demo_client(base_url: str, *, name: str) -> Iterator[openai.OpenAI]:
    """An openai client on the gateway (``.../v1``) with a short-lived key of its own, revoked after.

    The demo's own tooling: its calls bring their tests (HumanEval tasks, regexes), so the key holds
    ``verifiers:call`` and is trusted for training."""
    key, raw = api_key_create(name=name, scopes=[scopes.LLM, scopes.CALL_VERIFIER], trusted_for_training=True)
    try:
        yield openai.OpenAI(base_url=base_url, api_key=raw, max_retries=0, timeout=600)
    finally:
        api_key_revoke(api_key=key)


def send_demo_traffic(base_url: str) -> Iterator[str]:
    """Yields one line per call."""
    with demo_client(base_url, name="demo-traffic") as client:
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
                f"verdict={h['x-skillgate-verdict']} cost={money_display(h['x-skillgate-cost-usd'])} "
                f"answer={content[:60]!r}"
            )
