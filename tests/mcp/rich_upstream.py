"""An MCP server with tools, resources and prompts, on the official SDK's ``MCPServer``, served over the
older HTTP+SSE transport (``python -m tests.mcp.rich_upstream sse PORT``: the event stream at ``/sse``)
or Streamable HTTP (``... http PORT``: at ``/mcp``). Its text carries terminal controls (ANSI, BEL) and a
bidi override, which Skillgate must strip; ``notes://big`` is 200 KB (over an output bound), and every
read of a resource or prompt appends a line to ``$UPSTREAM_LOG`` when that is set (so a test sees what
reached the server). ``$UPSTREAM_DELAY_S`` delays every resource read and prompt (a slow upstream).

Also a tool pair: ``echo`` (read-only) and ``wipe`` (no annotations: a write).
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

DIRTY = (
    "\x1b[31mred\x1b[0m alarm\x07 and \u202eesrever \x9b1mbold\x9b0m hid\U000e0041\U000e0042den"
    " sof\u00adt fill\u3164er"
)
BIG_BYTES = 200_000

server = MCPServer("rich-upstream", version="1")


def _slow() -> None:
    time.sleep(float(os.environ.get("UPSTREAM_DELAY_S") or 0))


def _log(line: str) -> None:
    path = os.environ.get("UPSTREAM_LOG")
    if path:
        with open(path, "a") as out:
            out.write(line + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def echo(message: str) -> str:
    """Echo the message back."""
    return f"echo: {message}"


@server.tool()
def wipe(target: str) -> str:
    """Remove everything under target."""
    _log(f"wipe {target}")
    return "wiped"


@server.resource("notes://runbook", name="runbook", description=f"Runbook {DIRTY}", mime_type="text/plain")
def runbook() -> str:
    _log("read notes://runbook")
    _slow()
    return f"Step 1: restart the api. {DIRTY}"


@server.resource("notes://big", name="big", mime_type="text/plain")
def big() -> str:
    _log("read notes://big")
    return "x" * BIG_BYTES


@server.prompt(description=f"Triage a service {DIRTY}")
def triage(service: str) -> str:
    _log(f"prompt triage {service}")
    _slow()
    return f"Look at the logs of {service} first. {DIRTY}"


def main(argv: list[str]) -> None:
    kind, port = argv[0], int(argv[1])
    if kind == "sse":
        server.run("sse", host="127.0.0.1", port=port)
    else:
        server.run("streamable-http", host="127.0.0.1", port=port, json_response=True)


if __name__ == "__main__":
    main(sys.argv[1:])
