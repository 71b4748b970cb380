"""The gateway's settings groups: limits, upstream calls, budgets, the ledger, rate limits, verifiers
(the package's docstring says how they are declared and read)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import ClassVar

from core.conf import setting

_G = "SKILLGATE"


@dataclass(frozen=True)
class Limits:
    """What one call may be, and how many run at once."""

    SECTION: ClassVar[str] = _G
    max_body_bytes: int = setting(
        "MAX_BODY_BYTES",
        env="SKILLGATE_MAX_BODY_BYTES",
        default=4 * 1024 * 1024,
        ge=1,
        doc="Request bodies above this size are refused with 413 before they are parsed (app/edge.py).",
    )
    max_json_depth: int = setting(
        "MAX_JSON_DEPTH",
        env="SKILLGATE_MAX_JSON_DEPTH",
        default=64,
        ge=1,
        doc="JSON bodies nesting deeper than this are a 400 (routing's bounded parser), never recursion.",
    )
    max_in_flight: int = setting(
        "MAX_IN_FLIGHT",
        env="SKILLGATE_MAX_IN_FLIGHT",
        default=0,
        ge=0,
        doc="Calls in flight per server process before new ones get a 503 (load shedding); 0: no limit.",
    )
    default_max_tokens: int = setting(
        "DEFAULT_MAX_TOKENS",
        env="SKILLGATE_DEFAULT_MAX_TOKENS",
        default=1024,
        ge=1,
        doc="Output cap of a call that gives no max_tokens (a profile's max_tokens overrides it); it "
        "also bounds the budget reservation.",
    )
    lookup_cache_ttl_s: float = setting(
        "LOOKUP_CACHE_TTL_S",
        env="SKILLGATE_LOOKUP_CACHE_TTL_S",
        default=5.0,
        ge=0,
        doc="Each server process keeps API keys, task profiles and backends this long (0: read every "
        "call); other processes see a change within this time.",
    )
    max_json_elements: int = setting(
        "MAX_JSON_ELEMENTS",
        env="SKILLGATE_MAX_JSON_ELEMENTS",
        default=100_000,
        ge=1,
        doc="JSON bodies with more elements than this (arrays, objects, strings and the commas between "
        "values) are a 400, counted at C speed before they are parsed (routing/json_body.py).",
    )
    max_form_escapes: int = setting(
        "MAX_FORM_ESCAPES",
        env="SKILLGATE_MAX_FORM_ESCAPES",
        default=65_536,
        ge=1,
        doc="An application/x-www-form-urlencoded body with more percent escapes (and raw non-ASCII "
        "bytes) than this is a 400, counted at C speed as it arrives, before Django decodes it in "
        "Python (app/edge.py).",
    )
    body_read_timeout_s: float = setting(
        "BODY_READ_TIMEOUT_S",
        env="SKILLGATE_BODY_READ_TIMEOUT_S",
        default=30.0,
        gt=0,
        doc="A request's headers must arrive within this many seconds of their first byte (of the "
        "connection, for its first request), and its body within as long again after them; a slower "
        "client gets a 408 (app/serve.py, app/edge.py).",
    )
    send_timeout_s: float = setting(
        "SEND_TIMEOUT_S",
        env="SKILLGATE_SEND_TIMEOUT_S",
        default=30.0,
        gt=0,
        doc="A client that takes less than 16 KiB of its answer in this many seconds, while the server "
        "has more to send than the socket holds, has its connection aborted: the call gives its place "
        "back and a stream is billed as cut (app/serve.py).",
    )
    trusted_proxies: tuple[str, ...] = setting(
        "TRUSTED_PROXIES",
        env="SKILLGATE_TRUSTED_PROXIES",
        default=(),
        doc="Addresses or networks (10.0.0.0/8, comma-separated) of the reverse proxies whose "
        "X-Forwarded-For and X-Forwarded-Proto are believed; empty: forwarded headers are ignored and "
        "the client is the socket's peer (app/edge.py).",
    )


@dataclass(frozen=True)
class Upstream:
    """How backends are called."""

    SECTION: ClassVar[str] = _G
    timeout_s: float = setting(
        "UPSTREAM_TIMEOUT_S",
        env="SKILLGATE_UPSTREAM_TIMEOUT_S",
        default=120.0,
        gt=0,
        doc="Timeout of one upstream call (the synced backends' timeout_s).",
    )
    direct_client: bool = setting(
        "DIRECT_CLIENT",
        env="SKILLGATE_DIRECT_CLIENT",
        default=True,
        doc="Backends that speak OpenAI's protocol natively (openai/..., hosted_vllm/...) are called by "
        "the gateway's own pooled HTTP client, not litellm; false: all via litellm.",
    )
    embedding_backend: str = setting(
        "EMBEDDING_BACKEND",
        env="SKILLGATE_EMBEDDING_BACKEND",
        default="",
        doc='POST /v1/embeddings with model "auto" goes to the backend of this name; empty: "auto" is '
        "refused (503, no_backend).",
    )
    max_connections: int = setting(
        "UPSTREAM_MAX_CONNECTIONS",
        env="SKILLGATE_UPSTREAM_MAX_CONNECTIONS",
        default=1000,
        ge=1,
        doc="The direct client's connection pool, per server process (per event loop).",
    )
    max_keepalive: int = setting(
        "UPSTREAM_MAX_KEEPALIVE",
        env="SKILLGATE_UPSTREAM_MAX_KEEPALIVE",
        default=1000,
        ge=0,
        doc="Idle connections the direct client keeps per upstream (default: as many as its pool holds). "
        "A bound under the calls in flight closes and reopens connections at every peak (at 256 "
        "concurrent calls, 100 made one call in two open a new connection); an idle one goes after "
        "UPSTREAM_KEEPALIVE_S anyway.",
    )
    keepalive_s: float = setting(
        "UPSTREAM_KEEPALIVE_S",
        env="SKILLGATE_UPSTREAM_KEEPALIVE_S",
        default=4.0,
        ge=0,
        doc="Idle connections are dropped after this, before uvicorn's (so vLLM's) 5 s keep-alive.",
    )


@dataclass(frozen=True)
class Budgets:
    """Holding a call's worst case against its key's budget before it runs."""

    SECTION: ClassVar[str] = _G
    mode: str = setting(
        "BUDGET_MODE",
        env="SKILLGATE_BUDGET_MODE",
        default="lease",
        choices=("lease", "reservation"),
        doc='"lease": each server process holds a slice of a key\'s budget and reserves calls against '
        'it in memory; "reservation": a conditional UPDATE and a row per call.',
    )
    reservation_ttl_s: int = setting(
        "RESERVATION_TTL_S",
        env="SKILLGATE_RESERVATION_TTL_S",
        default=900,
        ge=1,
        doc="A reservation not settled within this time (a crashed worker) is released by Celery beat; "
        "a call held on a lease for longer is dropped from it the same way.",
    )
    lease_fraction: float = setting(
        "BUDGET_LEASE_FRACTION",
        env="SKILLGATE_BUDGET_LEASE_FRACTION",
        default=0.1,
        gt=0,
        le=1,
        doc="A lease asks for this share of what is left of the budget (at most lease_max_usd, at "
        "least the call's worst case).",
    )
    lease_max_usd: Decimal = setting(
        "BUDGET_LEASE_MAX_USD",
        env="SKILLGATE_BUDGET_LEASE_MAX_USD",
        default=Decimal("1.0"),
        gt=0,
        doc="The most one lease holds, in USD.",
    )
    lease_ttl_s: int = setting(
        "BUDGET_LEASE_TTL_S",
        env="SKILLGATE_BUDGET_LEASE_TTL_S",
        default=60,
        ge=1,
        doc="A lease row is renewed while its process lives (every TTL/4) and is past expires_at after TTL.",
    )
    lease_idle_s: float = setting(
        "BUDGET_LEASE_IDLE_S",
        env="SKILLGATE_BUDGET_LEASE_IDLE_S",
        default=10.0,
        ge=0,
        doc="A lease with no call in flight for this long goes back to the key.",
    )
    lease_abandon_s: int = setting(
        "BUDGET_LEASE_ABANDON_S",
        env="SKILLGATE_BUDGET_LEASE_ABANDON_S",
        default=0,
        ge=0,
        doc="An expired lease of another machine is released by beat only after this long (its journal "
        "may hold spend, then written off); 0: never, that machine's recovery does it.",
    )


@dataclass(frozen=True)
class Ledger:
    """The call ledger: how rows are written, and how long their bodies are kept."""

    SECTION: ClassVar[str] = _G
    writer: str = setting(
        "LEDGER_WRITER",
        env="SKILLGATE_LEDGER_WRITER",
        default="batched",
        choices=("sync", "batched"),
        doc='"sync": each row is committed before its response; "batched": journalled before the '
        "response, group-committed by a writer thread every flush_ms (at once past batch_max rows).",
    )
    flush_ms: float = setting(
        "LEDGER_FLUSH_MS",
        env="SKILLGATE_LEDGER_FLUSH_MS",
        default=20.0,
        gt=0,
        doc="The group commit's window.",
    )
    batch_max: int = setting(
        "LEDGER_BATCH_MAX",
        env="SKILLGATE_LEDGER_BATCH_MAX",
        default=500,
        ge=1,
        doc="Rows of one group commit.",
    )
    journal_dir: Path = setting(
        "LEDGER_JOURNAL_DIR",
        env="SKILLGATE_LEDGER_JOURNAL_DIR",
        default_doc="VAR_DIR/journal",
        doc="Where each server process keeps its journal (one folder per database).",
    )
    journal_rotate_bytes: int = setting(
        "LEDGER_JOURNAL_ROTATE_BYTES",
        env="SKILLGATE_LEDGER_JOURNAL_ROTATE_BYTES",
        default=16 * 1024 * 1024,
        ge=1,
        doc="A journal segment rotates past this size.",
    )
    journal_fsync: str = setting(
        "LEDGER_JOURNAL_FSYNC",
        env="SKILLGATE_LEDGER_JOURNAL_FSYNC",
        default="batch",
        choices=("batch", "always", "off"),
        doc='"batch": before each group commit (an OS crash loses at most the last window\'s calls); '
        '"always": each line, before the response; "off".',
    )
    retention_days: int = setting(
        "LEDGER_RETENTION_DAYS",
        env="SKILLGATE_LEDGER_RETENTION_DAYS",
        default=30,
        ge=0,
        doc="Prompts and answers of calls older than this are blanked by beat (the row, costs, tokens and "
        "verdict stay); 0: kept forever.",
    )
    store_bodies: bool = setting(
        "LEDGER_STORE_BODIES",
        env="SKILLGATE_LEDGER_STORE_BODIES",
        default=True,
        doc="Off: only a SHA-256 and the message count are written (no replay or learning from those calls).",
    )
    purge_batch: int = setting(
        "LEDGER_PURGE_BATCH", env="SKILLGATE_LEDGER_PURGE_BATCH", default=500, ge=1, doc="Rows per purge."
    )
    purge_every_s: int = setting(
        "LEDGER_PURGE_EVERY_S",
        env="SKILLGATE_LEDGER_PURGE_EVERY_S",
        default=3600,
        ge=1,
        doc="How often beat runs the purge.",
    )


@dataclass(frozen=True)
class RateLimit:
    """Requests-per-minute limits: with Redis (CACHE_URL) a process takes tokens from the key's shared
    bucket in batches; with Redis silent, per-process buckets for a while."""

    SECTION: ClassVar[str] = f"{_G}.RATE_LIMIT"
    batch_s: float = setting(
        "BATCH_S",
        env="SKILLGATE_RATE_LIMIT_BATCH_S",
        default=0.1,
        gt=0,
        doc="A process takes this many seconds of the key's rate at once.",
    )
    batch_ttl_s: float = setting(
        "BATCH_TTL_S",
        env="SKILLGATE_RATE_LIMIT_BATCH_TTL_S",
        default=1.0,
        gt=0,
        doc="An unspent batch is kept this long.",
    )
    redis_timeout_s: float = setting(
        "REDIS_TIMEOUT_S",
        env="SKILLGATE_RATE_LIMIT_REDIS_TIMEOUT_S",
        default=0.25,
        gt=0,
        doc="Redis silent this long: per-process buckets.",
    )
    redis_retry_s: float = setting(
        "REDIS_RETRY_S",
        env="SKILLGATE_RATE_LIMIT_REDIS_RETRY_S",
        default=5.0,
        ge=0,
        doc="Per-process buckets this long before Redis is asked again.",
    )


@dataclass(frozen=True)
class Verifiers:
    """Verifiers and the sandbox code verifiers (python_tests) run in."""

    SECTION: ClassVar[str] = _G
    sandbox_allow_unsafe: bool = setting(
        "SANDBOX_ALLOW_UNSAFE",
        env="SKILLGATE_SANDBOX_ALLOW_UNSAFE",
        default=False,
        doc="Development only: where bubblewrap cannot run, run untrusted code in a plain subprocess (no "
        "isolation at all, a WARNING each time) instead of failing every answer.",
    )
    sandbox_python: str = setting(
        "SANDBOX_PYTHON",
        env="SKILLGATE_SANDBOX_PYTHON",
        default="",
        doc="The interpreter run inside (its standard library only); empty: the gateway's own when uid "
        "65534 can read it, else the system's python3.X of the same version.",
    )
    sandbox_bwrap: str = setting(
        "SANDBOX_BWRAP",
        env="SKILLGATE_SANDBOX_BWRAP",
        default="bwrap",
        nonempty=True,
        doc="The bwrap executable.",
    )
    workers: int = setting(
        "VERIFIER_WORKERS",
        env="SKILLGATE_VERIFIER_WORKERS",
        default=4,
        ge=1,
        doc="Verifications that are not trivially cheap run in this many worker processes per server "
        "process (routing/verifiers/pool.py), never under the serving process's GIL.",
    )
    workers_per_key: int = setting(
        "VERIFIER_WORKERS_PER_KEY",
        env="SKILLGATE_VERIFIER_WORKERS_PER_KEY",
        default=2,
        ge=1,
        doc="At most this many of the worker processes verify one API key's calls at once (capped at "
        "VERIFIER_WORKERS); its further verifications wait, so other keys' calls still get a worker.",
    )
    task_timeout_s: float = setting(
        "VERIFIER_TASK_TIMEOUT_S",
        env="SKILLGATE_VERIFIER_TASK_TIMEOUT_S",
        default=5.0,
        gt=0,
        doc="A verification still running in its worker process after this many seconds (plus a code "
        "verifier's own timeout_s) is stopped: the process is killed and replaced, the verdict is error.",
    )
    queue_wait_s: float = setting(
        "VERIFIER_QUEUE_WAIT_S",
        env="SKILLGATE_VERIFIER_QUEUE_WAIT_S",
        default=30.0,
        gt=0,
        doc="A verification that finds no free worker within this time is not run (verdict error).",
    )


@dataclass(frozen=True)
class CallMetrics:
    """The gateway's call metrics (the /metrics endpoint itself: app.conf.Metrics)."""

    SECTION: ClassVar[str] = f"{_G}.METRICS"
    max_label_sets: int = setting(
        "MAX_LABEL_SETS",
        env="SKILLGATE_METRICS_MAX_LABEL_SETS",
        default=2000,
        ge=1,
        doc='At most this many label sets per process; calls past it are counted under "_other".',
    )
