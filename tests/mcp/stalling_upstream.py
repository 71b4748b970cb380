"""An MCP server over Streamable HTTP that stalls on purpose (``python -m tests.mcp.stalling_upstream
PORT MODEFILE``), written on raw asyncio so that it can misbehave below HTTP: a real MCP server while
the file ``MODEFILE`` says ``ok``, and otherwise, at the JSON-RPC method the file names
(``<mode> <method>``, e.g. ``trickle tools/call``):

- ``headers``: reads the request and never answers (slow headers);
- ``body``: sends the headers of a JSON answer, then never its body (slow body);
- ``trickle``: an event stream that sends one byte every 0.2 s, forever (never a whole event);
- ``sse``: an event stream of comments every 0.1 s, forever (never the answer);
- ``huge``: for ``tools/list``, 20,000 tools with 2 KB descriptions (about 50 MB);
- ``getstream``: a GET (the server's notification stream) held open with comments forever, every POST
  answered normally.

Each request's method is appended to ``MODEFILE.log``, so a test sees what reached the server.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

TOOL = {"name": "get_status", "description": "Returns the status.", "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True}}  # fmt: skip


def _mode(path: Path) -> tuple[str, str]:
    words = (path.read_text() if path.exists() else "ok").split()
    return (words[0], words[1]) if len(words) == 2 else ("ok", "")


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(
        (int(v) for k, _, v in (line.partition(":") for line in lines) if k.lower() == "content-length"), 0
    )
    return lines[0].split(" ")[0], await reader.readexactly(length) if length else b""


HUGE_TOOLS = [{**TOOL, "name": f"get_t{n}", "description": "Returns " + "x" * 2000} for n in range(20_000)]
# Made once at start-up, so the huge answer comes at once (its id put in per request).
HUGE_ANSWER = json.dumps({"jsonrpc": "2.0", "id": "@ID@", "result": {"tools": HUGE_TOOLS}}).encode()


def _answer(message: dict) -> dict:
    method = message.get("method")
    if method == "initialize":
        result = {
            "protocolVersion": message["params"].get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stalling", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "status: ok"}], "isError": False}
    else:
        result = {}
    return {"jsonrpc": "2.0", "id": message.get("id"), "result": result}


async def _forever(writer: asyncio.StreamWriter, chunk: bytes, every: float) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\r\n")
    while True:
        writer.write(chunk)
        await writer.drain()
        await asyncio.sleep(every)


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, modefile: Path) -> None:
    try:
        while True:
            verb, body = await _read_request(reader)
            mode, at = _mode(modefile)
            if verb == "GET":
                if mode == "getstream":
                    await _forever(writer, b": still here\n\n", 0.1)
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                continue
            if verb != "POST":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                continue
            message = json.loads(body or b"{}")
            method = message.get("method", "")
            with open(f"{modefile}.log", "a") as log:
                log.write(method + "\n")
            if "id" not in message:  # a notification
                writer.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                continue
            if method == at and mode == "headers":
                await asyncio.sleep(3600)
            if method == at and mode == "body":
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"
                )
                await writer.drain()
                await asyncio.sleep(3600)
            if method == at and mode in ("trickle", "sse"):
                await _forever(
                    writer, b":" if mode == "trickle" else b": wait\n\n", 0.2 if mode == "trickle" else 0.1
                )
            answer = json.dumps(_answer(message)).encode()
            if method == at and mode == "huge":
                answer = HUGE_ANSWER.replace(b'"@ID@"', json.dumps(message.get("id")).encode(), 1)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                % len(answer)
                + answer
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main(port: int, modefile: Path) -> None:
    server = await asyncio.start_server(lambda r, w: _handle(r, w, modefile), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), Path(sys.argv[2])))
