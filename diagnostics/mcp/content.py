"""An upstream MCP server's resources and prompts, for the gateway (plain Python, no ORM): list and read
resources, list and get prompts, each over one short connection with the server's timeout, read cap and
URL policy (client.py's :func:`~diagnostics.mcp.client.with_client`).

What comes back is rebuilt from the fields the gateway hands on, never passed through as sent:

- every string loses its terminal and layout controls (:func:`~diagnostics.mcp.vetting.clean_text`);
- icons and ``_meta`` are dropped (an icon is a URL the agent's client would fetch);
- listings stop at :data:`MAX_ITEMS` items and 50 pages;
- a read or a prompt carries at most ``max_output_bytes`` of content in all: text past it is cut (with a
  note saying so), a binary (blob) part that does not fit is replaced by a note naming its size;
- a part that is neither text nor a blob (an image in a prompt, say) is named, not carried.

A server that does not offer resources (or prompts) lists none and reads nothing: its capability
decides, and nothing is asked of it.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp import Client

from diagnostics.mcp.client import Upstream, UpstreamError, cut, with_client
from diagnostics.mcp.vetting import clean_text

MAX_ITEMS = 500
_PAGES = 50


def _text(value: str | None, limit: int = 2000) -> str | None:
    return None if value is None else clean_text(value)[:limit]


def _resource(item: types.Resource) -> types.Resource:
    return types.Resource(
        name=clean_text(item.name)[:200],
        title=_text(item.title, 200),
        uri=clean_text(str(item.uri))[:2000],
        description=_text(item.description),
        mime_type=_text(item.mime_type, 200),
        size=item.size,
    )


def _template(item: types.ResourceTemplate) -> types.ResourceTemplate:
    return types.ResourceTemplate(
        name=clean_text(item.name)[:200],
        title=_text(item.title, 200),
        uri_template=clean_text(item.uri_template)[:2000],
        description=_text(item.description),
        mime_type=_text(item.mime_type, 200),
    )


def _prompt(item: types.Prompt) -> types.Prompt:
    arguments = [
        types.PromptArgument(
            name=clean_text(a.name)[:200],
            title=_text(a.title, 200),
            description=_text(a.description),
            required=a.required,
        )
        for a in (item.arguments or [])[:50]
    ]
    return types.Prompt(
        name=clean_text(item.name)[:200],
        title=_text(item.title, 200),
        description=_text(item.description),
        arguments=arguments or None,
    )


class _Budget:
    """The bytes of content one answer may still carry."""

    def __init__(self, limit: int) -> None:
        self.left = limit

    def text(self, text: str) -> str:
        kept, size, _ = cut(clean_text(text), max(0, self.left))
        self.left -= min(size, self.left)
        return kept

    def blob(self, blob: str) -> bool:
        if len(blob) > self.left:
            return False
        self.left -= len(blob)
        return True


def _contents(
    part: types.TextResourceContents | types.BlobResourceContents, budget: _Budget
) -> types.TextResourceContents | types.BlobResourceContents:
    uri, mime = clean_text(str(part.uri))[:2000], _text(part.mime_type, 200)
    if isinstance(part, types.TextResourceContents):
        return types.TextResourceContents(uri=uri, mime_type=mime, text=budget.text(part.text))
    if budget.blob(part.blob):
        return types.BlobResourceContents(uri=uri, mime_type=mime, blob=part.blob)
    note = f"[binary content of {len(part.blob)} base64 characters: over this server's output bound]"
    return types.TextResourceContents(uri=uri, mime_type="text/plain", text=note)


def _message(message: types.PromptMessage, budget: _Budget) -> types.PromptMessage:
    content = message.content
    text = (
        budget.text(content.text) if isinstance(content, types.TextContent) else f"[{content.type} content]"
    )
    return types.PromptMessage(role=message.role, content=types.TextContent(text=text))


async def _pages(client: Client, fetch: Any, field: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(_PAGES):  # a paginator that never ends cannot hang the listing
        page = await fetch(cursor=cursor)
        items += list(getattr(page, field))
        cursor = page.next_cursor
        if cursor is None or len(items) >= MAX_ITEMS:
            break
    return items[:MAX_ITEMS]


async def list_resources_async(upstream: Upstream) -> list[types.Resource]:
    async def work(client: Client) -> list[types.Resource]:
        if client.server_capabilities.resources is None:
            return []
        return [_resource(r) for r in await _pages(client, client.list_resources, "resources")]

    return await with_client(upstream, work)


async def list_resource_templates_async(upstream: Upstream) -> list[types.ResourceTemplate]:
    async def work(client: Client) -> list[types.ResourceTemplate]:
        if client.server_capabilities.resources is None:
            return []
        pages = await _pages(client, client.list_resource_templates, "resource_templates")
        return [_template(t) for t in pages]

    return await with_client(upstream, work)


def _not_offered(upstream: Upstream, what: str) -> UpstreamError:
    return UpstreamError(f"MCP server {upstream.name!r} offers no {what}.", kind="protocol")


async def read_resource_async(upstream: Upstream, uri: str) -> types.ReadResourceResult:
    async def work(client: Client) -> types.ReadResourceResult:
        if client.server_capabilities.resources is None:
            raise _not_offered(upstream, "resources")
        result = await client.read_resource(uri, cache_mode="bypass")
        budget = _Budget(upstream.max_output_bytes)
        return types.ReadResourceResult(contents=[_contents(c, budget) for c in result.contents[:MAX_ITEMS]])

    return await with_client(upstream, work)


async def list_prompts_async(upstream: Upstream) -> list[types.Prompt]:
    async def work(client: Client) -> list[types.Prompt]:
        if client.server_capabilities.prompts is None:
            return []
        return [_prompt(p) for p in await _pages(client, client.list_prompts, "prompts")]

    return await with_client(upstream, work)


async def get_prompt_async(upstream: Upstream, name: str, arguments: dict[str, str]) -> types.GetPromptResult:
    async def work(client: Client) -> types.GetPromptResult:
        if client.server_capabilities.prompts is None:
            raise _not_offered(upstream, "prompts")
        result = await client.get_prompt(name, arguments)
        budget = _Budget(upstream.max_output_bytes)
        return types.GetPromptResult(
            description=_text(result.description),
            messages=[_message(m, budget) for m in result.messages[:MAX_ITEMS]],
        )

    return await with_client(upstream, work)
