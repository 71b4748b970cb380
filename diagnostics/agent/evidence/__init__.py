"""What the tools returned, turned into evidence: ``analyzers`` (raw output to findings, deterministic),
``inventory`` (the objects a listing shows, to resolve names against), ``freshness`` (current vs history),
``logtemplates`` (log lines grouped by template), ``compressor`` (raw output under a token budget) and
``claims`` (an LLM's answer checked against all of it)."""
