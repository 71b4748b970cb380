"""Observability: the Prometheus endpoint /metrics (app/observability)."""

from __future__ import annotations

from app.conf import McpEdge, Metrics
from app.settings.gateway import SKILLGATE
from core.conf import from_env
from routing.conf import CallMetrics

# Declared in app/conf.py (the endpoint) and routing/conf/ (the call metrics' label sets).
SKILLGATE["METRICS"] = {**from_env(Metrics), **from_env(CallMetrics)}
SKILLGATE["MCP_EDGE"] = from_env(McpEdge)  # the /mcp endpoints' sessions and OAuth (app/mcp/)
