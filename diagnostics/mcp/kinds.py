"""What an MCP tool's output is, as the operator declares it per tool (``McpTool.output_kind``).

The analyzers recognise some outputs by the tool's name (a log by ``log`` in it); a third-party server's
tools are named by their authors (``read_text_file``, ``search``), so the operator says what a tool's
output is and the read toolset hands it on with each result (``ToolResult.kind``). Empty: not declared.
"""

from __future__ import annotations

LOGS = "logs"
METRICS = "metrics"
EVENTS = "events"
TRACES = "traces"

OUTPUT_KINDS = ("", LOGS, METRICS, EVENTS, TRACES)
