"""The second floor: the same raw-ASGI pass-through as floor.py, with aiohttp's pooled client instead of
httpx (the upstream client Skillgate moves to, issue 42). Served by app/serve.py's server, as Skillgate is:

    FLOOR_UPSTREAM=http://127.0.0.1:PORT/v1 python -m app.serve --app bench.gateway_overhead.floor_aiohttp:app

It forwards the body of ``POST /v1/chat/completions`` as it is and streams the answer's bytes back; no
parsing, no auth, no database.
"""

import os

import aiohttp

UPSTREAM = os.environ.get("FLOOR_UPSTREAM", "http://127.0.0.1:8000/v1").rstrip("/")
URL = UPSTREAM + "/chat/completions"
HEADERS = {"content-type": "application/json"}
_session: aiohttp.ClientSession | None = None


def session() -> aiohttp.ClientSession:
    global _session
    if _session is None:
        connector = aiohttp.TCPConnector(limit=1000, limit_per_host=0, keepalive_timeout=60)
        _session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=60), auto_decompress=False
        )
    return _session


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    async with session().post(URL, data=body, headers=HEADERS) as upstream:
        content_type = upstream.headers.get("content-type", "application/json").encode()
        await send(
            {
                "type": "http.response.start",
                "status": upstream.status,
                "headers": [(b"content-type", content_type)],
            }
        )
        async for chunk in upstream.content.iter_any():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
