"""Callers send media inline, not by URL, unless the operator allowed it for the key (``media:urls``).

The attack: litellm's Anthropic provider (and its Bedrock, Gemini and Ollama ones) downloads an ``http://``
image URL from the gateway's host to inline it, so a caller could make the gateway GET any address it
reaches. A local listener stands where that URL points (a metadata service, an admin port); the teacher is
litellm's Anthropic provider in front of a local Messages-protocol stub. Without the scope the call is
refused (403 ``missing_scope``, in the caller's protocol) before any request leaves the gateway; with it,
the gateway passes the URL on, and litellm does fetch it (public hosts; it refuses private addresses by
itself), which is why the scope is the operator's call.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import pytest
from aiohttp import web

from bench.support.threaded_server import ThreadedServer
from routing import scopes
from routing.models import Backend, Invocation, TaskProfile
from tests.factories import TaskProfileFactory, claude_teacher, make_key
from tests.support.anthropic_stub import AnthropicStub

pytestmark = pytest.mark.django_db(transaction=True)

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
INLINE = "data:image/png;base64," + base64.b64encode(PNG).decode()


@dataclass
class Listener(ThreadedServer):
    """An internal address: answers every GET with a PNG and records the paths asked for."""

    host: str = "127.0.0.1"
    port: int = 0
    paths: list[str] = field(default_factory=list)

    def app(self) -> web.Application:
        async def anything(request: web.Request) -> web.Response:
            self.paths.append(request.path)
            return web.Response(body=PNG, content_type="image/png")

        app = web.Application()
        app.router.add_get("/{tail:.*}", anything)
        return app


@pytest.fixture
def internal() -> Iterator[Listener]:
    with Listener() as listener:
        yield listener


@pytest.fixture
def claude(backends: dict[str, Backend]) -> Iterator[AnthropicStub]:
    """The default profile's teacher is litellm's Anthropic provider, against a local stub."""
    with AnthropicStub() as upstream:
        teacher = claude_teacher(upstream.base_url)
        TaskProfileFactory.create(name="vision", policy=TaskProfile.Policy.ALWAYS_TEACHER, teacher=teacher)
        yield upstream


def _image_call(gateway_url: str, key: str, url: str) -> Any:
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0, timeout=30)
    return client.chat.completions.with_raw_response.create(
        model="auto",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        ],
        metadata={"task": "vision"},
    )


def test_an_image_url_is_refused_before_the_gateway_fetches_it(gateway_url, api_key, claude, internal):
    url = f"http://127.0.0.1:{internal.port}/latest/meta-data/iam/security-credentials/"
    with pytest.raises(openai.PermissionDeniedError) as refused:
        _image_call(gateway_url, api_key.raw, url)
    error = refused.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == ("missing_scope", "messages[0].content[1].image_url.url")
    assert scopes.MEDIA_URLS in error["message"] and "data: URL" in error["message"]
    assert internal.paths == [] and claude.requests == [] and not Invocation.objects.exists()


def test_with_the_operators_scope_the_url_is_passed_on_and_litellm_fetches_it(
    gateway_url, claude, internal, monkeypatch
):
    """litellm refuses private addresses itself (its ``user_url_validation``); the listener stands for a
    public host here, so it is allowed to litellm by name."""
    import litellm

    monkeypatch.setattr(litellm, "user_url_allowed_hosts", [f"127.0.0.1:{internal.port}"])
    key = make_key(name="vision", scopes=[scopes.LLM, scopes.MEDIA_URLS])
    url = f"http://127.0.0.1:{internal.port}/cat.png"
    raw = _image_call(gateway_url, key.raw, url)
    assert raw.parse().choices[0].message.content == "ok from claude"
    assert internal.paths == ["/cat.png"]  # what the scope allows: the gateway's host fetched it
    (image,) = [b for b in claude.requests[0]["messages"][0]["content"] if b["type"] == "image"]
    assert image["source"]["data"] == base64.b64encode(PNG).decode()


def test_inline_media_and_urls_in_text_are_served(gateway_url, api_key, claude, internal):
    raw = _image_call(gateway_url, api_key.raw, INLINE)
    assert raw.http_response.status_code == 200
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=api_key.raw, max_retries=0, timeout=30)
    text = f"Summarize http://127.0.0.1:{internal.port}/page for me."
    reply = client.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
        metadata={"task": "vision"},
    )
    assert reply.choices[0].message.content == "ok from claude"
    assert internal.paths == []  # words are not fetched


def _chat(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": parts}]}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/chat/completions",
            _chat([{"type": "file", "file": {"file_id": "https://internal.example/report.pdf"}}]),
            "messages[0].content[0].file.file_id",
        ),
        (
            "/v1/chat/completions",
            _chat([{"type": "image_url", "image_url": "file:///etc/passwd"}]),
            "messages[0].content[0].image_url",
        ),
        (
            "/v1/responses",
            {
                "model": "auto",
                "input": [
                    {"role": "user", "content": [{"type": "input_image", "image_url": "http://10.0.0.1/"}]}
                ],
            },
            "messages[0].content[0].image_url.url",
        ),
        (
            "/v1/messages",
            {
                "model": "auto",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "url", "url": "http://10.0.0.1/"}}],
                    }
                ],
            },
            "messages[0].content[0].image_url.url",
        ),
    ],
)
def test_every_protocol_refuses_media_by_url_in_its_own_error_shape(
    gateway_url, backends, api_key, stub, path, body, param
):
    headers = {"Authorization": f"Bearer {api_key.raw}", "x-api-key": api_key.raw}
    response = httpx.post(gateway_url + path, json=body, headers=headers, timeout=30)
    assert response.status_code == 403, response.text
    if path == "/v1/messages":
        assert response.json()["type"] == "error"
        assert response.json()["error"]["type"] == "permission_error"
        assert response.json()["error"]["message"].startswith(param)
    else:
        assert (response.json()["error"]["code"], response.json()["error"]["param"]) == (
            "missing_scope",
            param,
        )
    assert stub.requests == []


def test_the_anthropic_sdk_gets_a_permission_error(gateway_url, backends, api_key, stub):
    client = anthropic.Anthropic(base_url=gateway_url, api_key=api_key.raw, max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError, match="media:urls"):
        client.messages.create(
            model="auto",
            max_tokens=5,
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "url", "url": "http://10.0.0.1/x.png"}}],
                }
            ],
        )
