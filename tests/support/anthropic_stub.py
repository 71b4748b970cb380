"""A local upstream that speaks Anthropic's Messages protocol (JSON), standing in for Anthropic: a
teacher row ``anthropic/<model>`` with this stub's base URL is reached through litellm's Anthropic
provider, which translates the gateway's chat form into a Messages request. It records every body."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench.support.threaded_server import ThreadedServer


@dataclass
class AnthropicStub(ThreadedServer):
    answer: str = "ok from claude"
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        return app

    async def _messages(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.keys.append(request.headers.get("x-api-key", ""))
        words = sum(len(str(m.get("content")).split()) for m in body.get("messages") or [])
        return web.json_response(
            {
                "id": f"msg_{uuid.uuid4().hex}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": [{"type": "text", "text": self.answer}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": words, "output_tokens": len(self.answer.split())},
            }
        )
