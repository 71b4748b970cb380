"""A local upstream that speaks the OpenAI chat-completions protocol (JSON and SSE).

It stands in for a paid provider: the gateway reaches it through litellm exactly as it would
reach OpenAI. Tests script its answers with ``responder``; it records every request body.
Run it alone with ``python -m bench.support.openai_stub --port 9100`` (used by bench/).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench.support.threaded_server import ThreadedServer


@dataclass
class Reply:
    content: str | None = "ok"
    tool_calls: list[dict[str, Any]] | None = None
    status: int = 200
    error: str = ""
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    cached_tokens: int = 0
    # For a request with n > 1: one answer per entry (non-streamed), as vLLM and OpenAI answer n;
    # without samples, n copies of ``content``.
    samples: list[str] | None = None
    # What /v1/embeddings answers: this vector for the first input, times i+1 for the i-th.
    embedding: list[float] = field(default_factory=lambda: [0.5, -0.25, 1.0, 0.125])
    # A stream whose connection breaks (reset, no [DONE], no usage) after this many words.
    cut_after: int | None = None
    # The tier the answer says it was served at (OpenAI's response ``service_tier``); None: the tier
    # the request asked for, if any.
    service_tier: str | None = None
    # The prompt tokens the answer's usage reports, where a test bills what the body does not show
    # (media billed by its pixels or pages); None: counted from the body as below.
    prompt_tokens: int | None = None


BYTES_PER_TOKEN = 4
BILLED_FIELDS = ("messages", "tools", "functions", "response_format", "tool_choice", "function_call")


def billed_prompt_tokens(body: dict[str, Any]) -> int:
    """What a provider billing every prompt byte charges for ``body`` (``bills_prompt_bytes``)."""
    billed = {name: body[name] for name in BILLED_FIELDS if name in body}
    return -(-len(json.dumps(billed, ensure_ascii=False).encode()) // BYTES_PER_TOKEN)


def _words(value: Any) -> int:
    return len(json.dumps(value).split()) if value else 0


def _prediction_tokens(prediction: Any, content: str | None) -> tuple[int, int]:
    """(accepted, rejected) tokens of a predicted output: a word of it the answer has is accepted."""
    if not isinstance(prediction, dict):
        return 0, 0
    text = prediction.get("content")
    if isinstance(text, list):
        text = " ".join(part.get("text", "") for part in text if isinstance(part, dict))
    words = str(text or "").split()
    used = set((content or "").split())
    accepted = sum(word in used for word in words)
    return accepted, len(words) - accepted


@dataclass
class OpenAIStub(ThreadedServer):
    responder: Callable[[dict[str, Any]], Reply] = field(default=lambda body: Reply())
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)
    # As a real provider bills: every prompt byte it is sent (messages, tools, functions, the response
    # schema) counts, a token per BYTES_PER_TOKEN bytes; off: a token per word of the messages.
    bills_prompt_bytes: bool = False

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    async def _embeddings(self, request: web.Request) -> web.Response:
        """OpenAI's embeddings: a vector per input (``Reply.embedding`` scaled by the input's position,
        or ``dimensions`` long when asked), usage counting an input's words (a token array its tokens)."""
        body = await request.json()
        self.requests.append(body)
        self.authorizations.append(request.headers.get("Authorization", ""))
        reply = self.responder(body)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.status != 200:
            error = {"message": reply.error or "stub failure", "type": "server_error", "param": None}
            return web.json_response({"error": error}, status=reply.status)
        value = body["input"]
        inputs = [value] if isinstance(value, str) or (value and isinstance(value[0], int)) else value
        base = reply.embedding[: body["dimensions"]] if body.get("dimensions") else reply.embedding
        data = [
            {"object": "embedding", "index": i, "embedding": [x * (i + 1) for x in base]}
            for i in range(len(inputs))
        ]
        tokens = sum(len(item) if isinstance(item, list) else len(item.split()) for item in inputs)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return web.json_response({"object": "list", "data": data, "model": body["model"], "usage": usage})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.authorizations.append(request.headers.get("Authorization", ""))
        reply = self.responder(body)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.status != 200:
            error = {
                "message": reply.error or "stub failure",
                "type": "server_error",
                "param": None,
                "code": None,
            }
            return web.json_response({"error": error}, status=reply.status)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        # A predicted output (``prediction``) is billed as OpenAI bills it: its tokens the answer did
        # not use are rejected, and counted in completion_tokens with the answer's own.
        accepted, rejected = _prediction_tokens(body.get("prediction"), reply.content)
        counted = billed_prompt_tokens(body) if self.bills_prompt_bytes else _words(body.get("messages"))
        usage: dict[str, Any] = {
            "prompt_tokens": counted if reply.prompt_tokens is None else reply.prompt_tokens,
            "completion_tokens": _words(reply.content) + _words(reply.tool_calls) + rejected,
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
        }
        if body.get("prediction") is not None:
            usage["completion_tokens_details"] = {
                "accepted_prediction_tokens": accepted,
                "rejected_prediction_tokens": rejected,
            }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        finish = "tool_calls" if reply.tool_calls else "stop"
        base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body["model"]}
        tier = reply.service_tier or body.get("service_tier")
        if tier is not None:  # as OpenAI answers: the tier it served the call at ("auto" resolved)
            base["service_tier"] = "default" if tier == "auto" else tier
        if not body.get("stream"):
            n = int(body.get("n") or 1)
            answers = reply.samples if reply.samples and n > 1 else [reply.content] * n
            choices = [
                {"index": i, "message": {**message, "content": text}, "finish_reason": finish}
                for i, text in enumerate(answers)
            ]
            usage["completion_tokens"] = (
                sum(_words(text) for text in answers) + _words(reply.tool_calls) + rejected * n
            )
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            completion = {**base, "object": "chat.completion", "choices": choices, "usage": usage}
            return web.json_response(completion)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = {**base, "object": "chat.completion.chunk"}

        async def send(data: dict[str, Any]) -> None:
            await response.write(b"data: " + json.dumps(data).encode() + b"\n\n")

        await send({**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        for i, piece in enumerate((reply.content or "").split(" ") if reply.content else []):
            if reply.cut_after is not None and i >= reply.cut_after:
                assert request.transport is not None
                request.transport.abort()  # the connection resets: no [DONE], no usage
                return response
            await send({**chunk, "choices": [{"index": 0, "delta": {"content": piece + " "}}]})
            await asyncio.sleep(reply.chunk_delay_s)
        for i, call in enumerate(reply.tool_calls or []):
            await send({**chunk, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, **call}]}}]})
        await send({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            await send({**chunk, "choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    args = parser.parse_args()
    stub = OpenAIStub(host=args.host, port=args.port)
    web.run_app(stub.app(), host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
