"""MCP servers as toolsets: each registered server's read tools for the Probe, its write tools for the
Executor (design.md section 4; classification in diagnostics/mcp/classify.py).

Plain Python, no ORM: the incidents app (diagnostics/mcp/attach.py) builds :class:`McpServerView` values
from its tables and hands them in. The two toolsets are separate objects built from separate lists: the
read toolset is given only the tools classified ``read``, so a write tool is not even named to the
Probe; the write toolset exists only in the Executor's hands.

Every call connects, lists the server's tools and checks that the tool is still the one classified (its
fingerprint: name, description, schema, annotations) before calling it, in the same session. A tool that
changed is not called: the call answers that it changed, and ``on_call`` reports it (``changed``) so the
incidents app re-classifies the server.

A diagnosis holds its toolsets for minutes; what an operator decides meanwhile applies at the next call,
not at the next diagnosis: before each call, ``standing`` (the incidents app's reading of its tables)
says whether the tool is still of the class this toolset holds, with the fingerprint, preset and server
identity it was built with. A tool demoted, held, disabled, taken off the allow-list, or a server
re-pointed or disabled since is refused (``refused``), and nothing is sent upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from diagnostics.mcp.client import CallOutput, Upstream, UpstreamError, checked_call_async
from diagnostics.mcp.presets import merged, trimmed_schema
from diagnostics.toolsets.base import (
    ActionResult,
    HealthResult,
    ReadToolset,
    ToolResult,
    ToolSpec,
    WriteToolset,
)
from diagnostics.toolsets.registry import Environment

PREFIX = "mcp"
SEP = "__"


def qualified(server: str, tool: str) -> str:
    """The name a tool goes by inside Skillgate: ``mcp__<server>__<tool>``."""
    return f"{PREFIX}{SEP}{server}{SEP}{tool}"


def split_qualified(name: str) -> tuple[str, str] | None:
    """(server, tool) of a qualified name, or None when it is not an MCP tool's."""
    parts = name.split(SEP, 2)
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


@dataclass(frozen=True)
class McpToolView:
    name: str
    description: str
    input_schema: dict[str, Any]
    fingerprint: str
    output_kind: str = ""  # logs, metrics, events, traces (diagnostics/mcp/kinds.py); "" not declared
    preset: dict[str, Any] = field(default_factory=dict)  # operator-fixed arguments (mcp/presets.py)


@dataclass(frozen=True)
class McpServerView:
    """One server as the incidents app classified it: only the tools of one class are listed.
    ``identity``: the server's registered identity then (selectors.server_identity), for ``standing``."""

    upstream: Upstream
    tools: tuple[McpToolView, ...]
    identity: str = ""


@dataclass(frozen=True)
class CallRecord:
    """What one call did, for the ledger: ``status`` ok, error, changed, or an UpstreamError's kind."""

    server: str
    tool: str
    arguments: dict[str, Any]
    status: str
    latency_ms: int = 0
    result_bytes: int = 0
    error: str = ""


OnCall = Callable[[CallRecord, str], None]  # (record, surface)
# (server view, tool, class the toolset holds: "read" or "write") -> why it may not be called now, or ""
Standing = Callable[[McpServerView, McpToolView, str], str]


def _spec(server: str, tool: McpToolView) -> ToolSpec:
    schema = tool.input_schema if tool.input_schema.get("type") == "object" else {"type": "object"}
    schema = trimmed_schema(schema, tool.preset)
    said = f" (Its output: {tool.output_kind}.)" if tool.output_kind else ""
    if tool.preset:
        said += f" (Set by the operator: {', '.join(sorted(tool.preset))}.)"
    return ToolSpec(qualified(server, tool.name), tool.description[:2000] + said, schema)


class _McpCaller:
    """What the read and the write toolset share: find the tool, call it checked, report."""

    surface = ""
    klass = ""

    def __init__(
        self, view: McpServerView, on_call: OnCall | None = None, standing: Standing | None = None
    ) -> None:
        self._view = view
        self._upstream = view.upstream
        self._tools = {qualified(view.upstream.name, t.name): t for t in view.tools}
        self._on_call = on_call
        self._standing = standing

    def _specs(self) -> list[ToolSpec]:
        return [_spec(self._upstream.name, tool) for tool in self._tools.values()]

    def _call(self, name: str, arguments: dict[str, Any]) -> tuple[CallOutput | None, str]:
        """(output, problem): the output when the tool ran (it may say is_error), else why not."""
        tool = self._tools.get(name)
        if tool is None:
            return None, f"{name!r} is not a tool of this toolset"
        arguments, refused = merged(tool.preset, arguments)
        if refused:
            return None, refused
        record = CallRecord(self._upstream.name, tool.name, arguments, "ok")
        if self._standing is not None and (withdrawn := self._standing(self._view, tool, self.klass)):
            problem = f"MCP tool {tool.name!r} of {self._upstream.name!r} was not called: {withdrawn}."
            self._report(record, status="refused", error=problem)
            return None, problem
        try:
            output = anyio.run(checked_call_async, self._upstream, tool.name, arguments, tool.fingerprint)
        except UpstreamError as exc:
            self._report(record, status=exc.kind, error=str(exc))
            return None, str(exc)
        if output is None:
            problem = (
                f"MCP tool {tool.name!r} of {self._upstream.name!r} changed (or disappeared) since it was "
                "classified; it was not called and is being re-classified."
            )
            self._report(record, status="changed", error=problem)
            return None, problem
        self._report(
            record,
            status="error" if output.is_error else "ok",
            latency_ms=output.latency_ms,
            result_bytes=output.size_bytes,
        )
        return output, ""

    def _report(self, record: CallRecord, **changes: Any) -> None:
        if self._on_call is not None:
            self._on_call(CallRecord(**{**record.__dict__, **changes}), self.surface)


class McpReadToolset(_McpCaller, ReadToolset):
    """A server's read tools (``readOnlyHint: true``, or promoted by an operator)."""

    name = "mcp"
    surface = "probe"
    klass = "read"

    def tools(self) -> list[ToolSpec]:
        return self._specs()

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        output, problem = self._call(tool, params)
        if output is None:
            return ToolResult(tool, params, problem, ok=False, no_data=True)
        kind = self._tools[tool].output_kind
        return ToolResult(
            tool, params, output.text, ok=not output.is_error, no_data=not output.text.strip(), kind=kind
        )


class McpWriteToolset(_McpCaller, WriteToolset):
    """A server's write tools: everything not classified read. Only the Executor holds one."""

    name = "mcp"
    surface = "executor"
    klass = "write"

    def actions(self) -> list[ToolSpec]:
        return self._specs()

    def run(self, action: str, args: dict[str, Any]) -> ActionResult:
        output, problem = self._call(action, args)
        if output is None:
            return ActionResult(action, args, False, problem)
        return ActionResult(action, args, not output.is_error, output.text)

    def health(self, target: str) -> HealthResult:
        return HealthResult(False, "not checked: an MCP tool has no health check; its answer is the outcome")


class McpEnvironment(Environment):
    """Another environment plus the MCP servers registered for it."""

    name = "mcp"

    def __init__(
        self,
        base: Environment,
        *,
        read: list[McpServerView],
        write: list[McpServerView],
        on_call: OnCall | None = None,
        standing: Standing | None = None,
    ) -> None:
        super().__init__(base.options)
        self._base = base
        self._read = read
        self._write = write
        self._on_call = on_call
        self._standing = standing

    def read_toolsets(self) -> list[ReadToolset]:
        mine: list[ReadToolset] = [
            McpReadToolset(v, self._on_call, self._standing) for v in self._read if v.tools
        ]
        return [*self._base.read_toolsets(), *mine]

    def write_toolsets(self) -> list[WriteToolset]:
        mine: list[WriteToolset] = [
            McpWriteToolset(v, self._on_call, self._standing) for v in self._write if v.tools
        ]
        return [*self._base.write_toolsets(), *mine]
