"""A call as the router sees it (messages, tools, response schema, profile), and its texts."""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cachetools
import orjson

from routing.router.learning.records import ReplayRecord

HEAD_CHARS = 4000
TAIL_CHARS = 8000
_DIGEST = "\0digest"  # CallInput._texts' entry for ``digest`` (the rendered texts' names are words)


@dataclass(frozen=True)
class CallInput:
    messages: Sequence[dict[str, Any]]
    tools: Sequence[dict[str, Any]] = ()
    profile: str = ""
    has_verifier: bool = False
    turn_index: int = 0
    skillbook_matched: bool = False
    response_format: dict[str, Any] | None = None
    _texts: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    _tool_texts: list[str] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def from_record(cls, record: ReplayRecord) -> CallInput:
        request = record.request
        return cls(
            messages=request.get("messages") or [],
            tools=request.get("tools") or [],
            profile=record.profile,
            has_verifier=record.has_verifier,
            turn_index=record.turn_index,
            skillbook_matched=record.skillbook_matched,
            response_format=request.get("response_format"),
        )

    @classmethod
    def from_call(cls, call: Any, *, skillbook_matched: bool | None = None) -> CallInput:
        """From a ``routing.router.policies.Call`` (the gateway's view of a request and its profile)."""
        request = call.request
        matched = bool(call.profile.skillbook_text) if skillbook_matched is None else skillbook_matched
        dumped = call.dumped  # the request as its plan dumped it (exclude_none), when the caller has it
        if dumped is None:
            dumped = request.model_dump(include={"messages", "tools"}, exclude_none=True)
        return cls(
            messages=dumped["messages"],
            tools=dumped.get("tools") or [],
            profile=call.profile.name,
            has_verifier=call.has_verifier,
            turn_index=call.turn_index,
            skillbook_matched=matched,
            response_format=request.response_format,
        )

    def digest(self) -> str | None:
        """A digest of everything the router's features read from this call, computed once: equal
        digests, equal features. Of a message that is its role, its ``content_text`` (a media part is
        its type: an image's megabytes are not hashed) and its tool calls' names and arguments; then
        the tools, the response schema, the profile, the verifier, the turn and the SkillBook match.
        None when one of them is something JSON cannot encode (nothing is cached then)."""
        found = self._texts.get(_DIGEST)
        if found is None:
            facts = [self.profile, self.has_verifier, self.turn_index, self.skillbook_matched]
            messages = [_read_of(m) for m in self.messages]
            try:
                data = orjson.dumps([*facts, messages, self.tools, self.response_format])
            except TypeError:  # orjson.JSONEncodeError is one
                return None
            found = self._texts[_DIGEST] = hashlib.blake2b(data, digest_size=16).hexdigest()
        return found

    def _text(self, name: str) -> str:
        if name not in self._texts:
            self._texts.update(_render(self))
        return self._texts[name]

    @property
    def tool_texts(self) -> list[str]:
        """Each tool's JSON (``tool_json``), once per call: the key of every per-tool cache."""
        if len(self._tool_texts) != len(self.tools):
            self._tool_texts[:] = [tool_json(t) for t in self.tools]
        return self._tool_texts

    @property
    def head(self) -> str:
        """System prompt, tool signatures and response schema: what an agent repeats every turn."""
        return self._text("head")

    @property
    def conversation(self) -> str:
        return self._text("conversation")

    @property
    def last_turn(self) -> str:
        """The new input of this call: every message after the last assistant message."""
        return self._text("last_turn")


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text", "") if p.get("type") == "text" else f"[{p.get('type')}]"
            for p in content
            if isinstance(p, dict)
        ]
        return " ".join(str(p) for p in parts)
    return ""


def _read_of(message: dict[str, Any]) -> list[Any]:
    """What the features read of ``message`` (``_message_text``, ``_meta``): the key of ``digest``."""
    calls = message.get("tool_calls") or []
    functions = [(c.get("function") or {}) if isinstance(c, dict) else {} for c in calls]
    named = [[f.get("name", ""), f.get("arguments", "")] for f in functions]
    return [message.get("role"), content_text(message.get("content")), len(calls), named]


def _message_text(message: dict[str, Any]) -> str:
    text = content_text(message.get("content"))
    for call in message.get("tool_calls") or []:
        function = (call.get("function") or {}) if isinstance(call, dict) else {}
        text += f" call {function.get('name', '')}({function.get('arguments', '')})"
    return f"{message.get('role', '')}: {text.strip()}"


def schema_outline(schema: Any, depth: int = 0) -> str:
    if not isinstance(schema, dict) or depth > 6:
        return ""
    if schema.get("type") == "array" or "items" in schema:
        return f"[{schema_outline(schema.get('items'), depth + 1)}]"
    props = schema.get("properties")
    if isinstance(props, dict):
        return "{" + ", ".join(f"{k}{schema_outline(v, depth + 1)}" for k, v in props.items()) + "}"
    return ""


def schema_stats(schema: Any, depth: int = 0) -> tuple[int, int]:
    """(nesting depth, number of fields) of a JSON schema; objects and arrays are one level each."""
    if not isinstance(schema, dict) or depth > 12:
        return 0, 0
    if schema.get("type") == "array" or "items" in schema:
        inner_depth, inner_fields = schema_stats(schema.get("items"), depth + 1)
        return inner_depth + 1, inner_fields
    props = schema.get("properties")
    if isinstance(props, dict) and props:
        children = [schema_stats(v, depth + 1) for v in props.values()]
        return 1 + max(d for d, _ in children), len(props) + sum(f for _, f in children)
    return 0, 0


ARG_TYPES = ("string", "integer", "number", "boolean", "array", "object", "enum")
_TYPE_ALIASES = {"float": "number", "dict": "object", "tuple": "array", "list": "array", "int": "integer"}


@dataclass
class SchemaShape:
    """What a call's argument schemas ask for: fields, required fields, leaf types, the largest tool."""

    depth: int = 0
    fields: int = 0
    required: int = 0
    max_required: int = 0  # the most required fields of one tool
    types: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ARG_TYPES, 0))

    def add(self, schema: Any) -> None:
        before = self.required
        self._walk(schema, 0)
        self.max_required = max(self.max_required, self.required - before)
        depth, fields = schema_stats(schema)
        self.depth, self.fields = max(self.depth, depth), self.fields + fields

    def _walk(self, schema: Any, depth: int) -> None:
        if not isinstance(schema, dict) or depth > 12:
            return
        required = schema.get("required")
        if isinstance(required, list):
            self.required += len(required)
        props = schema.get("properties")
        if isinstance(props, dict):
            for child in props.values():
                if isinstance(child, dict):
                    self._count(child)
                self._walk(child, depth + 1)
        if isinstance(schema.get("items"), dict):
            self._walk(schema["items"], depth + 1)

    def _count(self, schema: dict[str, Any]) -> None:
        if "enum" in schema:
            self.types["enum"] += 1
            return
        kind = schema.get("type")
        kind = kind[0] if isinstance(kind, list) and kind else kind
        kind = _TYPE_ALIASES.get(str(kind), str(kind))
        if kind in self.types:
            self.types[kind] += 1


def schema_shape(tools: Sequence[dict[str, Any]], response_format: dict[str, Any] | None) -> SchemaShape:
    shape = SchemaShape()
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        shape.add(function.get("parameters") if isinstance(function, dict) else None)
    shape.add(response_schema(response_format))
    return shape


# Families of error signatures in logs and tool output, as lowercase substrings: str.count runs in C,
# so the whole tail is scanned in microseconds (regular expressions cost ten times more here).
ERROR_FAMILIES: dict[str, tuple[str, ...]] = {
    "error": ("error", "exception", "traceback", "panic", "fatal", "critical", "failed", "failure"),
    "memory": ("oom", "out of memory", "memory limit", "exit code 137"),
    "timeout": ("timeout", "timed out", "deadline exceeded"),
    "network": ("refused", "unreachable", "reset by peer", "no route", "dns", "servfail", "lookup"),
    "auth": ("denied", "forbidden", "unauthori", "x509", "certificate", "tls", "ssl"),
    "missing": ("not found", "no such", "missing", "not set", "undefined", "keyerror"),
    "concurrency": ("deadlock", "lock wait", "mutex", "race", "split brain", "leader", "skew"),
    "http5xx": (" 500", " 502", " 503", " 504", "status=5"),
}
_ALL_SIGNATURES = tuple(sub for subs in ERROR_FAMILIES.values() for sub in subs)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")


def error_signatures(text: str) -> tuple[int, int]:
    """(error-signature matches, distinct families matched) in ``text``."""
    low = text.lower()
    hits = families = 0
    for subs in ERROR_FAMILIES.values():
        found = sum(map(low.count, subs))  # no generator frame per substring: twice per routed call
        hits += found
        families += found > 0
    return hits, families


def error_lines(text: str, limit: int) -> list[str]:
    """The last ``limit`` lines of ``text`` with an error signature (lowercased)."""
    found: list[str] = []
    for line in reversed(text.lower().splitlines()):
        if any(sub in line for sub in _ALL_SIGNATURES):
            found.append(line)
            if len(found) >= limit:
                break
    return found[::-1]


def number_count(text: str) -> int:
    """Numbers a call's new input states: values an answer often has to copy into arguments."""
    return len(_NUMBER.findall(text))


_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])")  # words, and acronyms before a capitalised word
_STOP = frozenset(
    "the and for with from that this what which when where how are was were can you your please "
    "into about has have had will would should could its our their them they then than also not "
    "all any get set given use using used one two each per".split()
)
STEM = 6


def content_words(text: str) -> frozenset[str]:
    """The distinct content words of ``text``, cut to their first ``STEM`` letters: identifiers split
    at underscores and case changes (``get_weatherForecast`` -> get, weathe, foreca), stop words and
    words under 3 letters dropped. Crude on purpose: a call is featurized in the gateway's hot path."""
    words = {w.lower() for w in set(_WORD.findall(text)) if len(w) > 2}  # each distinct word once
    return frozenset(w[:STEM] for w in words if w not in _STOP)


@dataclass(frozen=True)
class ToolMatch:
    """How the request's words meet the offered tools' words (name, description, parameters).

    ``best``: the largest share of the request's content words one tool's words cover; ``margin``:
    how far the best tool stands above the next (1 tool: its own share); ``hits``: the best tool's
    count of shared words. No tools, or a request with no content words: all zero."""

    best: float = 0.0
    margin: float = 0.0
    hits: int = 0
    index: int = -1  # the best tool's position (-1: none shares a word)


def tool_match(request: str, tool_words: Sequence[frozenset[str]]) -> ToolMatch:
    """``tool_words``: each offered tool's ``content_words(tool_text(tool))``."""
    if not tool_words:  # no tools: the request's words are not read (a long last message costs ms)
        return ToolMatch()
    asked = content_words(request)
    if not asked:
        return ToolMatch()
    counts = [len(asked & words) for words in tool_words]
    shared = sorted(counts, reverse=True)
    second = shared[1] if len(shared) > 1 else 0
    return ToolMatch(
        best=shared[0] / len(asked),
        margin=(shared[0] - second) / len(asked),
        hits=shared[0],
        index=counts.index(shared[0]) if shared[0] else -1,
    )


def tool_text(tool: dict[str, Any]) -> str:
    """A tool's name, description and parameter names and descriptions, as plain words."""
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict):
        return ""
    parts = [str(function.get("name") or ""), str(function.get("description") or "")]
    _schema_words(function.get("parameters"), parts, 0)
    return " ".join(parts)


def _schema_words(schema: Any, parts: list[str], depth: int) -> None:
    if not isinstance(schema, dict) or depth > 6:
        return
    if isinstance(schema.get("description"), str):
        parts.append(schema["description"])
    props = schema.get("properties")
    if isinstance(props, dict):
        for name, child in props.items():
            parts.append(str(name))
            _schema_words(child, parts, depth + 1)
    _schema_words(schema.get("items"), parts, depth + 1)


def log1p_count(value: float) -> float:
    return math.log1p(max(value, 0.0))


def response_schema(response_format: dict[str, Any] | None) -> Any:
    if not response_format:
        return None
    inner = response_format.get("json_schema")
    return inner.get("schema") if isinstance(inner, dict) else None


def tool_json(tool: Any) -> str:
    """The tool's JSON, its keys in the caller's order (a schema's properties are outlined in that order):
    the key of its cached line, words and shape. orjson (in C); json for what orjson refuses (a lone
    surrogate, an integer beyond 64 bits)."""
    try:
        return orjson.dumps(tool).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(tool)


def digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def render_tool(tool: Any) -> str:
    """A tool as the head shows it: name, parameters' outline, description."""
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict):
        function = {}
    outline = schema_outline(function.get("parameters"))
    return f"{function.get('name', '')}{outline}: {function.get('description') or ''}".strip()


TOOL_LINES_CACHE_CHARS = 8 * 1024 * 1024
"""Tools are the caller's: their lines are kept by size (each cut to the head's length), not by count."""


@cachetools.cached(
    cache=cachetools.LRUCache(maxsize=TOOL_LINES_CACHE_CHARS, getsizeof=lambda line: 64 + len(line)),
    key=digest,
    lock=threading.Lock(),
)
def tool_line(text: str) -> str:
    """``render_tool`` of the tool ``text`` (from ``tool_json``), once per distinct tool: agents send the
    same tools on every turn, and outlining each schema per call was most of the router's own time."""
    return render_tool(json.loads(text))[:HEAD_CHARS]


def _render(call: CallInput) -> dict[str, str]:
    system = [
        content_text(m.get("content")) for m in call.messages if m.get("role") in ("system", "developer")
    ]
    tools = [tool_line(text) for text in call.tool_texts]
    head = "\n".join(system)
    if tools:
        head += "\ntools: " + "; ".join(tools)
    response = response_schema(call.response_format)
    if response is not None:
        head += "\nresponse schema: " + schema_outline(response)
    rest = [m for m in call.messages if m.get("role") not in ("system", "developer")]
    last_assistant = max((i for i, m in enumerate(rest) if m.get("role") == "assistant"), default=-1)
    return {
        "head": head[:HEAD_CHARS],
        "conversation": "\n".join(_message_text(m) for m in rest)[-TAIL_CHARS:],
        "last_turn": "\n".join(_message_text(m) for m in rest[last_assistant + 1 :])[-TAIL_CHARS:],
        "system_chars": str(sum(len(s) for s in system)),
    }
