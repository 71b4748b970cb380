"""MCP servers, their tools and changes, gateway grants and calls (diagnostics/mcp/)."""

from __future__ import annotations

import factory
from django.utils import timezone

from diagnostics.mcp.classify import fingerprint
from diagnostics.models import (
    McpCall,
    McpGrant,
    McpServer,
    McpTool,
    McpToolChange,
)
from tests.factories.routing import ApiKeyFactory


class McpServerFactory(factory.django.DjangoModelFactory[McpServer]):
    """A registered stdio server, never connected (``mcp_server_sync`` lists and classifies its tools)."""

    class Meta:
        model = McpServer

    name = factory.Sequence(lambda n: f"mcp-{n}")
    environment = "local"
    transport = McpServer.Transport.STDIO
    command = factory.LazyFunction(lambda: ["mcp-server-filesystem", "/var/log/lab"])


class McpToolFactory(factory.django.DjangoModelFactory[McpTool]):
    """A tool as a connect would store it: read-only by its annotations, fingerprinted."""

    class Meta:
        model = McpTool

    server = factory.SubFactory(McpServerFactory)
    name = factory.Sequence(lambda n: f"read_file_{n}")
    description = "Read a file."
    input_schema = factory.LazyFunction(
        lambda: {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    )
    annotations = factory.LazyFunction(lambda: {"readOnlyHint": True})
    fingerprint = factory.LazyAttribute(
        lambda o: fingerprint(
            name=o.name, description=o.description, input_schema=o.input_schema, annotations=o.annotations
        )
    )
    declared = McpTool.Klass.READ
    declared_reason = "readOnlyHint: true"
    reviewed_at = factory.LazyFunction(timezone.now)  # an operator accepted its first classification


class McpToolChangeFactory(factory.django.DjangoModelFactory[McpToolChange]):
    class Meta:
        model = McpToolChange

    tool = factory.SubFactory(McpToolFactory)
    kind = "classified"
    note = "readOnlyHint: true"
    after = factory.LazyFunction(lambda: {"declared": "read", "pending": "", "override": ""})


class McpGrantFactory(factory.django.DjangoModelFactory[McpGrant]):
    """The key may reach the server through the gateway (every allowed tool)."""

    class Meta:
        model = McpGrant

    key = factory.SubFactory(ApiKeyFactory)
    server = factory.SubFactory(McpServerFactory)


class McpCallFactory(factory.django.DjangoModelFactory[McpCall]):
    """One gateway read that passed through (a ledger row)."""

    class Meta:
        model = McpCall

    surface = McpCall.Surface.GATEWAY
    key = factory.SubFactory(ApiKeyFactory)
    server = "fs"
    tool = "read_file"
    args_hash = "0" * 64
    status = "ok"
    latency_ms = 12
    result_bytes = 340
