"""JSON Schemas from callers, treated as data: bounded, self-contained, with linear-time patterns.

A caller's schema (formats, tools, a per-call verifier) is checked once at the edge (a refusal is a 400
naming the field); the verifiers validate answers with the same compiled validator. The rules:

- **No references leave the schema.** References must be local (``#...``); the retriever refuses every
  URI (nothing fetched or read, whatever ``$id`` says); one that does not resolve is a 400.
- **Patterns run in linear time**: jsonschema-rs's ``regex`` engine (no backtracking; lookaround and
  backreferences refused), at most :data:`MAX_PATTERN_CHARS` characters, :data:`REGEX_SIZE_LIMIT` bytes.
- **Size first**: at most :data:`MAX_SCHEMA_BYTES` bytes of JSON and :data:`MAX_SUBSCHEMAS` objects.
- **Cost is bounded, not only size** (issue 37: 2 KB of ``$defs`` that refer to each other twice per
  level make a validator do 2^levels checks). Before compiling, the schema's reference graph is
  counted (:func:`schema_cost`): its nodes are the subschemas, its edges every applicator and
  reference: ``$ref`` / ``$dynamicRef`` / ``$recursiveRef`` (an anchor reference reaches every node
  that declares it), ``allOf`` / ``anyOf`` / ``oneOf`` / ``not`` / ``if`` / ``then`` / ``else`` /
  ``dependentSchemas`` / ``dependencies`` (same instance location), and ``properties`` /
  ``patternProperties`` / ``additionalProperties`` / ``propertyNames`` / ``items`` / ``prefixItems`` /
  ``additionalItems`` / ``contains`` / ``unevaluated*`` (one level down in the instance). Three
  numbers, each counted in time linear in the graph (memoised per node, or bounded by the budget):

  1. *expansion*: the schema unrolled into a tree, references followed, each node's count memoised
     (``1 + the sum of its children's``); an edge back into the path being unrolled (recursion)
     counts 1 here, its cost is number 2's. At most :data:`MAX_SCHEMA_COST`.
  2. *checks along one instance path*: recursion is legitimate and bounded by the instance's depth,
     which the answer parser bounds (:data:`MAX_INSTANCE_DEPTH`). So the nodes evaluated at one
     instance location are counted level by level down to that depth: the same-location closure
     (walks counted with multiplicity), then of each node the largest group of edges that can reach
     one child (``properties.left`` and ``.right`` do not compound; two ``allOf`` branches that both
     descend into ``x`` do). A tree costs its size times the depth; one that doubles per level is
     refused. At most :data:`MAX_SCHEMA_COST`, evaluating at most :data:`MAX_COUNTED_PAIRS`
     (subschema, level) pairs.
  3. *fan-out*: the product of ``anyOf`` / ``oneOf`` alternatives along any path of the unrolled
     schema, at most :data:`MAX_FANOUT`.

  A reference cycle that never descends into the instance (``a`` -> ``allOf`` -> ``a``) would never
  end and is refused. A refusal names the limit; the edge answers it with a 400.

Compiled validators are cached by the schema's JSON, the least recently used dropped past
:data:`CACHE_BYTES`, each weighed from its size and :data:`PATTERN_BYTES` per pattern.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections import defaultdict
from typing import Any

import jsonschema_rs
import orjson
from cachetools import LRUCache

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SUBSCHEMAS = 5000  # OpenAI's structured outputs allow 5,000 object properties in all
MAX_PATTERN_CHARS = 1000
REGEX_SIZE_LIMIT = 1 << 20  # bytes of one compiled pattern (and of its lazy DFA)
PATTERN_BYTES = 2 * REGEX_SIZE_LIMIT  # what one compiled pattern may hold, in the cache's count
MAX_SCHEMA_COST = 100_000  # checks: of the unrolled schema, and along one instance path
MAX_FANOUT = 4096  # the product of anyOf / oneOf alternatives along one path
MAX_COUNTED_PAIRS = 10_000  # (subschema, instance level) pairs counting number 2 may evaluate
MAX_INSTANCE_DEPTH = 100  # routing.json_body.ANSWER_MAX_DEPTH (a sibling module: not imported here)
CACHE_BYTES = 64 * 1024 * 1024
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
_PATTERNS = jsonschema_rs.RegexOptions(size_limit=REGEX_SIZE_LIMIT, dfa_size_limit=REGEX_SIZE_LIMIT)


class SchemaRefused(ValueError):
    """The schema cannot be used; the message says why, fit for the caller."""


def _no_retrieval(uri: str) -> Any:
    raise SchemaRefused(f"references outside the schema are not followed ({uri[:100]})")


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot be used (the module's rules), or None; a worker's finding if one vetted it."""
    if isinstance(schema, dict):
        with _cache_lock:
            text = orjson.dumps(schema, default=str, option=orjson.OPT_NON_STR_KEYS)
            vetted = _vetted.get(hashlib.sha256(text).digest(), False)
        if vetted is None or isinstance(vetted, str):
            return vetted
    try:
        validator(schema)
    except SchemaRefused as refused:
        return str(refused)
    return None


def schema_errors(schema: Any, instance: Any) -> str | None:
    """None when ``instance`` is valid against a usable ``schema``, else one line naming the first
    failing path and the reason (also when the schema itself is unusable)."""
    try:
        compiled = validator(schema)
    except SchemaRefused as refused:
        return f"the schema is unusable: {refused}"
    # The first error only: iter_errors copies the instance into every error (3.6 s for 3,270).
    if compiled.is_valid(instance):
        return None
    try:
        compiled.validate(instance)
    except jsonschema_rs.ValidationError as first:  # its message may quote the whole instance: cut
        text = (
            first.message
            if len(first.message) <= 500
            else f"{first.message[:240]} ... {first.message[-240:]}"
        )
        return f"at {_json_path(first.instance_path)}: {text}"
    return "invalid against the schema"  # is_valid and validate disagree: never seen; not a pass


def validator(schema: Any) -> jsonschema_rs.Validator:
    """The compiled validator of a usable ``schema``; :class:`SchemaRefused` otherwise."""
    if isinstance(schema, bool):
        return _compiled(orjson.dumps(schema))
    if not isinstance(schema, dict):
        raise SchemaRefused(f"must be an object, got {type(schema).__name__}")
    try:
        text = orjson.dumps(schema)
    except TypeError as exc:  # not JSON (a value only a Python caller could pass)
        raise SchemaRefused(f"is not JSON: {exc}") from None
    if len(text) > MAX_SCHEMA_BYTES:
        raise SchemaRefused(f"is {len(text)} bytes of JSON; at most {MAX_SCHEMA_BYTES} are allowed")
    return _compiled(text)


_cache: LRUCache[bytes, tuple[jsonschema_rs.Validator, int]] = LRUCache(CACHE_BYTES, lambda entry: entry[1])
_cache_lock = threading.Lock()


def _compiled(text: bytes) -> jsonschema_rs.Validator:
    with _cache_lock:
        found = _cache.get(text)
    if found is not None:
        return found[0]
    compiled, patterns = _compile(text)
    # A compiled validator's size, roughly, from its schema's; and each pattern at its caps (program and
    # lazy DFA): 20 distinct patterns in a 1 KB schema held 7 MB, 40 times what its size said.
    weight = 16 * 1024 + 64 * len(text) + patterns * PATTERN_BYTES
    if weight <= CACHE_BYTES // 8:
        with _cache_lock:
            _cache[text] = (compiled, weight)
    return compiled


# Cost checks a worker process made (routing/verifiers/vetting.py): schema text -> its problem or None.
_ENTRY_BYTES = 256  # a digest, its slot and the LRU's bookkeeping: about 200 bytes (tracemalloc)
_vetted: LRUCache[bytes, str | None] = LRUCache(CACHE_BYTES // 4, lambda p: _ENTRY_BYTES + sys.getsizeof(p))


def record_vetted(text: bytes, problem: str | None) -> None:
    """What a worker found counting the cost of the schema ``text`` (so this process does not count)."""
    with _cache_lock:
        _vetted[hashlib.sha256(text).digest()] = problem


def is_vetted(text: bytes) -> bool:
    with _cache_lock:
        return hashlib.sha256(text).digest() in _vetted or text in _cache


def _compile(text: bytes) -> tuple[jsonschema_rs.Validator, int]:
    """The validator of the schema ``text``, and how many patterns it compiled."""
    schema = orjson.loads(text)
    patterns = _check_shape(schema)
    with _cache_lock:
        vetted = _vetted.get(hashlib.sha256(text).digest(), False)
    if isinstance(vetted, str):
        raise SchemaRefused(vetted)
    if isinstance(schema, dict) and vetted is False:
        _check_cost(schema)
    try:
        compiled = jsonschema_rs.validator_for(
            schema, retriever=_no_retrieval, pattern_options=_PATTERNS, validate_formats=True
        )
    except jsonschema_rs.ValidationError as exc:  # the meta-schema, a pattern, a reference
        where = _json_path(exc.instance_path)
        raise SchemaRefused(f"{exc.message.splitlines()[0]} (at {where})") from None
    except (ValueError, TypeError) as exc:
        raise SchemaRefused(str(exc).splitlines()[0]) from None
    return compiled, patterns


def _check_shape(schema: Any) -> int:
    """The bounds compilation itself cannot keep: object count, reference targets, pattern sizes
    (one pass over the schema, no recursion). Returns how many patterns it holds."""
    stack, objects, patterns = [schema], 0, 0
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
            continue
        if not isinstance(item, dict):
            continue
        objects += 1
        if objects > MAX_SUBSCHEMAS:
            raise SchemaRefused(f"holds more than {MAX_SUBSCHEMAS} objects")
        for key in _REFERENCES:
            target = item.get(key)
            if isinstance(target, str) and not target.startswith("#"):
                raise SchemaRefused(f"{key} must point inside the schema ('#...'), not to {target[:100]!r}")
        pattern = item.get("pattern")
        if isinstance(pattern, str):
            patterns += 1
            if len(pattern) > MAX_PATTERN_CHARS:
                raise SchemaRefused(f"a pattern is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}")
        properties = item.get("patternProperties")
        if isinstance(properties, dict):
            patterns += len(properties)
            if any(len(p) > MAX_PATTERN_CHARS for p in properties):
                raise SchemaRefused(f"a patternProperties pattern is over {MAX_PATTERN_CHARS} characters")
        stack.extend(item.values())
    return patterns


# --- the cost of a schema (the module's rule "cost is bounded") ----------------------------------

_SAME_LISTS = ("allOf", "anyOf", "oneOf")
_SAME_ONE = ("not", "if", "then", "else")
_SAME_MAPS = ("dependentSchemas", "dependencies")
_DOWN_ONE = tuple("additionalProperties unevaluatedProperties propertyNames additionalItems".split())
_DOWN_ONE += ("unevaluatedItems", "contains")


class _Graph:
    """The subschemas of one schema and their edges, built as nodes are reached (by identity)."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.anchors: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.recursive: list[dict[str, Any]] = [root]
        stack: list[Any] = [root]
        while stack:  # every object that declares an anchor (references by name reach all of them)
            item = stack.pop()
            if isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, dict):
                for key in ("$anchor", "$dynamicAnchor"):
                    if isinstance(item.get(key), str):
                        self.anchors[item[key]].append(item)
                if item.get("$recursiveAnchor") is True:
                    self.recursive.append(item)
                stack.extend(item.values())
        self._edges: dict[int, tuple[list[dict[str, Any]], list[list[dict[str, Any]]], int]] = {}

    def edges(self, node: dict[str, Any]) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]], int]:
        """(same-location children, the groups of children one level down, alternatives here): a
        group is the edges that can reach one instance child (one property name, one index), each
        with every wildcard edge (``additionalProperties``, ``items``...) added."""
        found = self._edges.get(id(node))
        if found is not None:
            return found
        same: list[dict[str, Any]] = []
        alternatives = 1
        for key in _SAME_LISTS:
            value = node.get(key)
            if isinstance(value, list):
                same.extend(v for v in value if isinstance(v, dict))
                if key != "allOf":
                    alternatives *= max(1, len(value))
        same.extend(node[k] for k in _SAME_ONE if isinstance(node.get(k), dict))
        for key in _SAME_MAPS:
            value = node.get(key)
            if isinstance(value, dict):
                same.extend(v for v in value.values() if isinstance(v, dict))
        for key in _REFERENCES:
            target = node.get(key)
            if isinstance(target, str):
                same.extend(self._targets(key, target))
        keyed: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        wild = [node[k] for k in _DOWN_ONE if isinstance(node.get(k), dict)]
        for key in ("properties", "patternProperties"):
            value = node.get(key)
            if isinstance(value, dict):
                for name, child in value.items():
                    if isinstance(child, dict):
                        (keyed[("p", name)] if key == "properties" else wild).append(child)
        for key in ("items", "prefixItems"):
            value = node.get(key)
            if isinstance(value, dict):
                wild.append(value)
            elif isinstance(value, list):
                for index, child in enumerate(value):
                    if isinstance(child, dict):
                        keyed[("i", index)].append(child)
        groups = [group + wild for group in keyed.values()] or ([wild] if wild else [])
        found = (same, groups, alternatives)
        self._edges[id(node)] = found
        return found

    def _targets(self, key: str, target: str) -> list[dict[str, Any]]:
        if not target.startswith("#"):
            return []  # refused by _check_shape
        if key == "$recursiveRef":
            return self.recursive
        fragment = target[1:]
        if fragment and not fragment.startswith("/"):
            return self.anchors.get(fragment, [])
        node: Any = self.root
        for part in fragment.split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict):
                node = node.get(part)
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return []  # does not resolve: the compiler refuses it
        return [node] if isinstance(node, dict) else []


def schema_cost(schema: dict[str, Any]) -> tuple[int, int, int]:
    """(expansion, checks along one instance path, fan-out) of ``schema``, each counted up to just
    past its limit (the module's rule); :class:`SchemaRefused` for a cycle that never descends."""
    graph = _Graph(schema)
    _refuse_same_location_cycles(graph)
    expansion, fanout = _unrolled(graph)
    return expansion, _along_a_path(graph), fanout


def _check_cost(schema: dict[str, Any]) -> None:
    expansion, along, fanout = schema_cost(schema)
    if expansion > MAX_SCHEMA_COST:
        raise SchemaRefused(
            f"unrolls into more than {MAX_SCHEMA_COST} subschemas once its references are followed "
            f"(the limit on a schema's expanded cost is {MAX_SCHEMA_COST})"
        )
    if along < 0:
        raise SchemaRefused(
            f"recurses through more than {MAX_COUNTED_PAIRS} (subschema, instance level) pairs: too costly "
            f"to bound (the limit on a schema's counted pairs is {MAX_COUNTED_PAIRS})"
        )
    if along > MAX_SCHEMA_COST:
        raise SchemaRefused(
            f"makes more than {MAX_SCHEMA_COST} checks along one path of an instance {MAX_INSTANCE_DEPTH} "
            f"levels deep: its references multiply at each level (the limit is {MAX_SCHEMA_COST})"
        )
    if fanout > MAX_FANOUT:
        raise SchemaRefused(
            f"nests anyOf/oneOf alternatives whose product along one path exceeds {MAX_FANOUT} "
            f"(the limit on a schema's fan-out is {MAX_FANOUT})"
        )


def _refuse_same_location_cycles(graph: _Graph) -> None:
    """Refuses a cycle of same-location edges among the reachable nodes (it would never end).
    Iterative: no recursion however deep the schema."""
    on_path: set[int] = set()
    seen: set[int] = set()
    roots: list[dict[str, Any]] = [graph.root]
    while roots:
        start = roots.pop()
        if id(start) in seen:
            continue
        seen.add(id(start))
        on_path.add(id(start))
        stack = [(start, iter(graph.edges(start)[0]))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.discard(id(node))
                for group in graph.edges(node)[1]:
                    roots.extend(group)
                continue
            if id(child) in on_path:
                raise SchemaRefused(
                    "has a reference cycle that never descends into the instance (a $ref that leads "
                    "back to itself through allOf/anyOf/oneOf/not/if/then/else/dependentSchemas only)"
                )
            if id(child) not in seen:
                seen.add(id(child))
                on_path.add(id(child))
                stack.append((child, iter(graph.edges(child)[0])))


def _unrolled(graph: _Graph) -> tuple[int, int]:
    """Number 1 and 3 of the rule: a memoised post-order walk; a back edge counts 1."""
    cap = max(MAX_SCHEMA_COST, MAX_FANOUT) + 1
    size: dict[int, int] = {}
    fan: dict[int, int] = {}
    on_path: set[int] = set()

    def children(node: dict[str, Any]) -> list[dict[str, Any]]:
        same, groups, _ = graph.edges(node)
        below: dict[int, dict[str, Any]] = {}
        for group in groups:
            below.update((id(c), c) for c in group)
        return same + list(below.values())

    stack = [(graph.root, iter(children(graph.root)), 1, 1)]
    on_path.add(id(graph.root))
    while stack:
        node, rest, total, widest = stack[-1]
        child = next(rest, None)
        if child is not None:
            if id(child) in on_path:
                stack[-1] = (node, rest, min(cap, total + 1), widest)
            elif id(child) in size:
                stack[-1] = (node, rest, min(cap, total + size[id(child)]), max(widest, fan[id(child)]))
            else:
                on_path.add(id(child))
                stack.append((child, iter(children(child)), 1, 1))
            continue
        stack.pop()
        on_path.discard(id(node))
        size[id(node)] = total
        fan[id(node)] = min(cap, widest * graph.edges(node)[2])
        if stack:
            parent, rest, ptotal, pwidest = stack[-1]
            stack[-1] = (parent, rest, min(cap, ptotal + total), max(pwidest, fan[id(node)]))
    return size[id(graph.root)], fan[id(graph.root)]


def _along_a_path(graph: _Graph) -> int:
    """Number 2 of the rule: ``here(n, d)``, the checks that entering node ``n`` costs at an instance
    location with ``d`` levels below it, is ``n`` itself, plus ``here(s, d)`` of each same-location
    child ``s``, plus, when ``d`` > 0, the sum of ``here(c, d - 1)`` over the largest group of children
    one level down. Memoised per (node, level) and evaluated from the root only, without recursion; at
    most :data:`MAX_COUNTED_PAIRS` pairs are evaluated (past that -1: the schema is refused as too
    costly to count; legitimate recursion reaches few pairs)."""
    cap = MAX_SCHEMA_COST + 1
    memo: dict[tuple[int, int], int] = {}
    stack: list[tuple[dict[str, Any], int, bool]] = [(graph.root, MAX_INSTANCE_DEPTH, False)]
    while stack:
        node, depth, ready = stack.pop()
        if (id(node), depth) in memo:
            continue
        same, groups, _ = graph.edges(node)
        needs = [(child, depth) for child in same]
        if depth > 0:
            needs.extend((child, depth - 1) for group in groups for child in group)
        if not ready:
            missing = [(child, level) for child, level in needs if (id(child), level) not in memo]
            if missing:
                stack.append((node, depth, True))
                stack.extend((child, level, False) for child, level in missing)
                continue
        below = 0
        if depth > 0:
            below = max((sum(memo[id(c), depth - 1] for c in group) for group in groups), default=0)
        memo[id(node), depth] = min(cap, 1 + below + sum(memo[id(c), depth] for c in same))
        if len(memo) > MAX_COUNTED_PAIRS:
            return -1
    return memo[id(graph.root), MAX_INSTANCE_DEPTH]


def _json_path(parts: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
