"""Argument presets: arguments an operator fixes for one MCP tool (``McpTool.preset_args``).

A third-party read tool often needs an argument the rule-based planner cannot fill (the filesystem
server's ``read_text_file`` needs a ``path``). With ``{"path": "/srv/lab/logs/api.log"}`` preset, the
tool is offered to the agent without that argument (its schema loses the property and the requirement),
the preset value is always what is sent, and a caller who names a preset argument with another value is
refused, not obeyed. With every required argument preset, the tool takes no arguments: the planner calls
it like any whole-system read.

Plain Python: the check here runs when an operator sets a preset (diagnostics/mcp/servers.py); the
toolset (diagnostics/toolsets/mcp.py) trims the schema and merges the values at call time.
"""

from __future__ import annotations

import json
from typing import Any

from routing.schemas import schema_errors

MAX_ARGS = 16
MAX_BYTES = 4096
SCALARS = (str, int, float, bool)


def preset_problem(input_schema: dict[str, Any], preset: Any) -> str | None:
    """Why ``preset`` cannot be this tool's preset, or None: an object of at most 16 arguments the tool
    declares, each a string, number or boolean its schema accepts, 4 KiB in all."""
    if not isinstance(preset, dict):
        return "arguments: an object of argument name to value."
    if len(preset) > MAX_ARGS:
        return f"arguments: at most {MAX_ARGS}."
    if len(json.dumps(preset, default=str).encode()) > MAX_BYTES:
        return f"arguments: at most {MAX_BYTES} bytes of JSON."
    properties = input_schema.get("properties") if isinstance(input_schema, dict) else None
    properties = properties if isinstance(properties, dict) else {}
    for name, value in preset.items():
        if name not in properties:
            return f"arguments: the tool has no argument {name!r}."
        if not isinstance(value, SCALARS):
            return f"arguments.{name}: a string, number or boolean."
    definitions = {k: v for k, v in input_schema.items() if k in ("$defs", "definitions")}
    partial = {**definitions, "type": "object", "properties": {n: properties[n] for n in preset}}
    errors = schema_errors(partial, preset)
    return f"arguments: {errors}" if errors else None


def trimmed_schema(input_schema: dict[str, Any], preset: dict[str, Any]) -> dict[str, Any]:
    """The tool's schema as the agent sees it: the preset arguments gone from its properties and its
    required list."""
    if not preset:
        return input_schema
    properties = input_schema.get("properties")
    required = input_schema.get("required")
    schema = dict(input_schema)
    if isinstance(properties, dict):
        schema["properties"] = {k: v for k, v in properties.items() if k not in preset}
    if isinstance(required, list):
        schema["required"] = [r for r in required if r not in preset]
    return schema


def merged(preset: dict[str, Any], arguments: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the arguments sent, "") or ({}, why not): a preset argument named with another value is refused."""
    for name, value in arguments.items():
        if name in preset and preset[name] != value:
            return {}, f"argument {name!r} is set by the operator for this tool; it cannot be changed"
    return {**arguments, **preset}, ""
