"""Text templates for the synthetic replay generator: agents, tools, schemas, code tasks, logs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def pick(rng: np.random.Generator, items: Sequence[T]) -> T:
    """One item (rng.choice on a list converts it to an array first: 50x slower)."""
    return items[int(rng.integers(0, len(items)))]


SERVICES = ["payments", "checkout", "search", "auth", "ledger", "inventory", "mailer", "gateway", "billing"]
NAMESPACES = ["prod", "staging", "eu-west", "us-east", "batch"]

# (name, description, parameter schema depth): depth 1 = flat arguments, 3 = nested filters
TOOLS: list[tuple[str, str, int]] = [
    ("get_pods", "List pods in a namespace with their status.", 1),
    ("get_logs", "Fetch recent log lines of a pod.", 1),
    ("query_metrics", "Run a PromQL query over a time range.", 2),
    ("get_events", "Kubernetes events for an object.", 1),
    ("describe_pod", "Describe a pod: containers, probes, restarts.", 1),
    ("rollout_status", "Status and history of a deployment rollout.", 2),
    ("get_traces", "Search distributed traces by service and filters.", 3),
    ("list_nodes", "Nodes with pressure conditions.", 1),
    ("check_dns", "Resolve a name from inside the cluster.", 2),
    ("get_config", "Read a config map or secret's keys.", 2),
    ("search_incidents", "Search past incidents by labels and time windows.", 3),
    ("get_alerts", "Firing alerts with label matchers.", 3),
    ("scale_deployment", "Propose a replica change (needs approval).", 2),
    ("query_slo", "Error budget burn with nested windows and selectors.", 3),
]
PERSONAS = [  # (system prompt, number of tools): more tools, deeper schemas -> harder
    ("You are Skillgate's SRE probe. Use the read-only tools to gather evidence, one call per step.", 4),
    (
        "You are an incident investigator for the platform team. Call tools to find the root cause; "
        "be precise "
        "with arguments.",
        8,
    ),
    (
        "You are the on-call copilot with full observability access. Pick the right tool among many and fill "
        "nested filters exactly.",
        14,
    ),
]
SYMPTOMS = [
    ("is crashing after the last deploy", 0.5),
    ("returns 500s", 0.0),
    ("is slow for some users", -0.7),
    ("fails intermittently at night", -1.2),
    ("cannot be reached", 0.3),
]


def param_schema(depth: int) -> dict[str, Any]:
    leaf = {"type": "string"}
    if depth <= 1:
        return {"type": "object", "properties": {"name": leaf, "namespace": leaf}, "required": ["name"]}
    inner = param_schema(depth - 1)
    return {
        "type": "object",
        "properties": {
            "target": leaf,
            "filters": inner,
            "window": {"type": "object", "properties": {"start": leaf, "end": leaf}},
        },
    }


def tool_specs(count: int) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": n, "description": d, "parameters": param_schema(k)}}
        for n, d, k in TOOLS[:count]
    ]


FIELDS = [
    "invoice",
    "customer",
    "address",
    "line_items",
    "amount",
    "currency",
    "date",
    "vendor",
    "tax",
    "sku",
    "quantity",
    "contact",
    "email",
    "phone",
    "notes",
    "terms",
    "discount",
    "shipping",
    "city",
    "country",
]


def extraction_schema(rng: np.random.Generator, depth: int) -> dict[str, Any]:
    names = rng.choice(FIELDS, size=int(rng.integers(2, 5)), replace=False)
    props: dict[str, Any] = {}
    for i, name in enumerate(names):
        if depth > 1 and i == 0:
            child = extraction_schema(rng, depth - 1)
            props[str(name)] = (
                {"type": "array", "items": child} if rng.random() < 0.5 and depth > 2 else child
            )
        else:
            props[str(name)] = {"type": "string" if rng.random() < 0.7 else "number"}
    return {"type": "object", "properties": props, "required": list(props)}


DOC_LINES = [
    "Invoice {n} issued by {v} to {c}.",
    "Ship to {c}, {city}.",
    "Total due {a} {cur} by {d}.",
    "Line: {q} x SKU-{n} at {a} {cur}.",
    "Contact {c} at {c}@example.com.",
    "Discount {q}% applied.",
    "Notes: deliver before noon, call ahead.",
    "Tax {q}% included where applicable.",
]


def document(rng: np.random.Generator, lines: int) -> str:
    out = []
    for _ in range(lines):
        out.append(
            pick(rng, DOC_LINES).format(
                n=int(rng.integers(1000, 99999)),
                v=pick(rng, ["ACME", "Globex", "Initech"]),
                c=pick(rng, ["Ana", "Bo", "Chen", "Dara"]),
                city=pick(rng, ["Oslo", "Lyon"]),
                a=round(float(rng.uniform(5, 5000)), 2),
                cur=pick(rng, ["EUR", "USD"]),
                d=f"2026-0{rng.integers(1, 9)}-1{rng.integers(0, 9)}",
                q=int(rng.integers(1, 30)),
            )
        )
    return "\n".join(out)


# (phrasings, difficulty logit)
CODE_TOPICS: list[tuple[list[str], float]] = [
    (["reverses a string", "returns the string backwards"], 3.5),
    (["sums the even numbers of a list", "adds up the even integers in a list"], 3.5),
    (["counts the vowels in a word", "returns how many vowels a string has"], 3.0),
    (["parses ISO dates and returns weekday names", "converts date strings to day names"], 1.0),
    (["merges overlapping intervals", "combines intersecting ranges into disjoint ones"], 0.0),
    (
        [
            "finds the longest palindromic substring using dynamic programming",
            "returns the longest palindrome inside a string with a DP table",
        ],
        -2.5,
    ),
    (
        [
            "implements a tiny regular expression matcher supporting . and *",
            "matches a pattern with wildcard dot and Kleene star, no re module",
        ],
        -3.0,
    ),
    (
        [
            "computes shortest paths with Dijkstra on a weighted graph with negative-edge detection",
            "returns single-source shortest distances, rejecting negative cycles",
        ],
        -2.5,
    ),
    (
        [
            "solves the knapsack problem with item reconstruction",
            "returns the best subset for a 0/1 knapsack",
        ],
        -2.0,
    ),
]

# (phrasings of the error lines, difficulty logit): obvious errors vs subtle ones
LOG_ERRORS: list[tuple[list[str], float]] = [
    (
        [
            "Last State: Terminated Reason: OOMKilled exit code 137",
            "container killed: memory limit exceeded (OOM)",
        ],
        3.5,
    ),
    (
        [
            "Failed to pull image: ImagePullBackOff manifest unknown",
            "ErrImagePull: repository does not exist",
        ],
        3.5,
    ),
    (["Error: environment variable DATABASE_URL is not set", "KeyError: 'DATABASE_URL' missing config"], 3.0),
    (["bind: address already in use :8080", "listen tcp 0.0.0.0:8080: port already allocated"], 2.5),
    (
        [
            "x509: certificate signed by unknown authority during TLS handshake",
            "tls: failed to verify certificate chain, intermediate expired",
        ],
        -2.0,
    ),
    (
        [
            "lock wait timeout exceeded; deadlock found when trying to get lock",
            "goroutine blocked on mutex for 120s, possible lock ordering cycle",
        ],
        -2.5,
    ),
    (
        [
            "dial tcp: lookup ledger.prod.svc: i/o timeout (intermittent)",
            "DNS resolution flapped: SERVFAIL then NOERROR",
        ],
        -2.0,
    ),
    (
        [
            "raft: two leaders elected for term 41, split brain detected",
            "clock skew 4.2s between nodes, lease expired",
        ],
        -3.0,
    ),
]
LOG_NOISE = [
    "INFO request handled path=/api/v1/orders status=200 dur=12ms",
    "DEBUG cache hit key=user:{n}",
    "INFO health check ok",
    "WARN slow query took {n}ms",
    "INFO worker {n} picked job",
    "INFO GET /metrics 200",
    "DEBUG retrying connection attempt={n}",
]


def log_block(rng: np.random.Generator, error: list[str], lines: int) -> str:
    out = [
        f"2026-11-{rng.integers(10, 28)}T0{rng.integers(0, 9)}:{rng.integers(10, 59)}:"
        f"{rng.integers(10, 59)}Z " + pick(rng, LOG_NOISE).format(n=int(rng.integers(1, 999)))
        for _ in range(lines)
    ]
    where = len(out) - int(rng.integers(0, 4))
    out[where:where] = [
        f"ERROR {error[int(rng.integers(0, len(error)))]}",
        "ERROR back-off restarting failed container",
    ]
    return "\n".join(out)


SENTENCES = [
    "The committee reviewed the quarterly budget and deferred two projects.",
    "Revenue grew in the northern region while costs stayed flat.",
    "Several customers reported delays after the warehouse migration.",
    "The new policy takes effect next month and replaces the old guidelines.",
    "Engineers proposed a phased rollout to reduce the risk of outages.",
    "A follow-up meeting will decide the vendor for the analytics platform.",
]


def long_document(rng: np.random.Generator, chars: int) -> str:
    count = chars // min(len(s) for s in SENTENCES) + 1
    return " ".join(SENTENCES[i] for i in rng.integers(0, len(SENTENCES), size=count))[:chars]
