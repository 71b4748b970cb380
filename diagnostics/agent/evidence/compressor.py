"""Raw tool output -> a short summary under a token budget, for the Observer (which never sees raw
output). Deterministic: a header, the lines that carry signal (errors, states, reasons, events),
repeated lines folded with a count, then the head of the output while the budget lasts."""

from __future__ import annotations

import json
from collections import OrderedDict

from diagnostics.agent import rx
from diagnostics.toolsets.base import ToolResult

_SIGNAL = rx.compile(
    r"error|fail|warn|exception|refused|timed? ?out|killed|oom|backoff|pending|not found|denied|insufficient|"
    r"reason:|state:|exit code|status:|restart|ready|replicas|latency|slow|"
    r"\d+(?:\.\d+)?\s*(?:ms|s|seconds)\b|"
    r"unhealthy|panic|fatal|cannot|could not|unable|partition|missing|invalid|expired|throttl|5\d\d\b",
    rx.IGNORECASE,
)
_VOLATILE = rx.compile(r"\d+(?:\.\d+)?|[0-9a-f]{8,}")


def estimate_tokens(text: str) -> int:
    """About four characters per token, as common tokenizers average on English and logs."""
    return (len(text) + 3) // 4


class Compressor:
    def __init__(self, *, budget_tokens: int = 300) -> None:
        self.budget_tokens = budget_tokens

    def summarize(self, result: ToolResult) -> str:
        params = json.dumps(result.params, sort_keys=True, default=str)
        lines = [line.rstrip() for line in result.output.splitlines() if line.strip()]
        status = "no data" if result.no_data else ("ok" if result.ok else "error")
        header = f"{result.tool} {params} -> {status}, {len(lines)} lines"
        budget = self.budget_tokens * 4
        out = [header]
        used = len(header)
        folded: OrderedDict[str, tuple[str, int]] = OrderedDict()
        for line in lines:
            if _SIGNAL.search(line):
                key = _VOLATILE.sub("#", line.strip())
                first, count = folded.get(key, (line.strip(), 0))
                folded[key] = (first, count + 1)
        picked: list[str] = []
        for first, count in folded.values():
            text = first if len(first) <= 220 else first[:219] + "…"
            if count > 1:
                text += f"  (x{count})"
            picked.append(text)
        head = [line.strip()[:220] for line in lines[:3]]
        for text in picked or head:
            if used + len(text) + 1 > budget:
                out.append(f"… ({len(lines)} lines in all; summary cut at {self.budget_tokens} tokens)")
                break
            out.append(text)
            used += len(text) + 1
        return "\n".join(out)
