"""The floor: the least any Python gateway pays, a raw-ASGI pass-through with one pooled httpx client.

    FLOOR_UPSTREAM=http://127.0.0.1:PORT/v1 uvicorn bench.gateway_overhead.floor:app

It forwards the body of ``POST /v1/chat/completions`` as it is and streams the answer's bytes back; no
parsing, no auth, no database. Whatever a gateway does beyond this is its own cost.
"""

import os

import httpx

UPSTREAM = os.environ.get("FLOOR_UPSTREAM", "http://127.0.0.1:8000/v1").rstrip("/")
_client: httpx.AsyncClient | None = None


def client() -> httpx.AsyncClient:
    global _client
    if _client is None:
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        _client = httpx.AsyncClient(base_url=UPSTREAM, limits=limits, timeout=60)
    return _client


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    request = client().build_request(
        "POST", "/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    upstream = await client().send(request, stream=True)
    try:
        headers = [(b"content-type", upstream.headers.get("content-type", "application/json").encode())]
        await send({"type": "http.response.start", "status": upstream.status_code, "headers": headers})
        async for chunk in upstream.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        await upstream.aclose()
