"""The ``gateway`` candidate of bench/upstream_client.py: Skillgate's own upstream call, in a child process
of its own (``python -m bench.upstream_gateway --child gateway``), which sets Django up before routing is
imported, as every bench script that uses the apps does."""

from __future__ import annotations

from typing import Any

import bench.support.django_env  # noqa: F401  (first of the project imports: Django set up)
from bench import upstream_client
from bench.upstream_candidates import Made
from routing.call import openai_client, upstream
from routing.models import Backend


async def gateway_client(url: str) -> Made:
    """Skillgate's own call: routing.call.upstream with an ``openai/`` backend at the stub (Django set
    up by the caller), each answer parsed as the gateway parses it."""
    base = url.removesuffix("/chat/completions")
    backend = Backend(name="bench", role=Backend.Role.TEACHER, model="openai/bench-model", api_base=base)
    body = {"messages": [{"role": "user", "content": "Say a few words."}], "max_tokens": 64}

    async def whole() -> Any:
        return await upstream.complete(backend, body)

    async def streamed() -> Any:
        return sum([1 async for _ in await upstream.open_stream(backend, body)])

    return whole, streamed, openai_client.aclose_clients


if __name__ == "__main__":
    upstream_client.main(make=gateway_client)
