"""One LLM call, from plan to answer: ``plans`` (which legs: student, teacher, replicas, verifier),
``gateway`` (the call itself: budget hold, legs until one passes, the ledger row), ``legs`` (one leg and
its verdict), ``upstream`` and ``openai_client`` (the provider's HTTP API, or litellm), ``replicas``,
``votes`` (agreement among replicas), ``streaming`` (the streamed call), ``sampling`` (the background
teacher leg of sampled calls), ``embeddings`` and ``metrics`` (the Prometheus series of calls: plain
Python, importable before Django is set up, as the multiprocess collector's writers do).

Every API (routing/api/) translates its request into the chat protocol (routing/protocol.py) and calls
in here."""

__all__ = [
    "embeddings",
    "gateway",
    "legs",
    "metrics",
    "openai_client",
    "plans",
    "replicas",
    "sampling",
    "streaming",
    "upstream",
    "votes",
]
