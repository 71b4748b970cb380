"""Gateway overhead: the same upstream reached directly, through Skillgate and through a LiteLLM proxy.

One run starts an OpenAI-protocol stub upstream (``bench.support.openai_stub``), Skillgate (uvicorn,
``app.asgi:application``, a fresh migrated SQLite database under var/bench/, or PostgreSQL with
``--database-url``) and a LiteLLM proxy (from var/bench-venv), each its own process with a single
worker. An open-loop load generator (its own process, asyncio + aiohttp) offers fixed request rates
to each target, non-streaming and streaming, and records latency percentiles, errors and the
CPU the server used; then a step search finds the highest rate each target sustains.

    .venv/bin/python -m bench.gateway_overhead            # full run, several minutes
    .venv/bin/python -m bench.gateway_overhead --quick    # smoke test, about a minute

See bench/README.md for the set-up of var/bench-venv and how to read the results.

The package: ``common`` (paths, the request, CPU accounting from /proc), ``servers`` (starting the stub,
Skillgate and the LiteLLM proxy as child processes), ``load`` (the open-loop load generator, run as
``python -m bench.gateway_overhead _load``), ``seed`` (Skillgate's database, run as ``python -m
bench.gateway_overhead.seed``: it sets Django up, the parent does not), ``measure`` (one
point, the capacity search), ``report`` (the table and the markdown file), ``profile`` (py-spy under
load) and ``cli`` (the arguments and the run).
"""
