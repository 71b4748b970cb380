"""Gateway overhead: the same upstream reached directly, through the floors, Skillgate and a LiteLLM proxy.

One run starts an OpenAI-protocol stub upstream (``bench.support.openai_stub``), the floors (raw ASGI
pass-throughs: ``floor`` on uvicorn + httpx, ``floor-aiohttp`` on ``python -m app.serve`` + aiohttp),
Skillgate (``python -m app.serve``, the production server, on a fresh migrated SQLite database under
var/bench/, or PostgreSQL with ``--database-url``) and a LiteLLM proxy (from var/bench-venv), each one
process pinned to CPU 0, the stub and the load generator on the others. The load generator (its own
process, asyncio + aiohttp) runs closed-loop points (16 and 256 connections: capacity and CPU per call)
and open-loop fixed rates (latency percentiles, errors, CPU), then optionally a step search for the
highest rate each target sustains. The report opens with issue 42's checks, computed.

    .venv/bin/python -m bench.gateway_overhead --quick --skip-proxy   # smoke test, a few minutes
    .venv/bin/python -m bench.gateway_overhead.stacks                 # server and client candidates

See bench/README.md for the set-up of var/bench-venv, the full command and how to read the results.

The package: ``common`` (paths, the request, CPU accounting from /proc), ``children`` (child processes and
their pinning), ``servers`` (starting the stub, the floors, Skillgate and the LiteLLM proxy), ``load`` (the
load generator, run as ``python -m bench.gateway_overhead _load``), ``seed`` (Skillgate's database, run as
``python -m bench.gateway_overhead.seed``: it sets Django up, the parent does not), ``measure`` (one point,
the capacity search), ``verdict`` (the closed-loop table and issue 42's checks), ``report`` (the tables and
the markdown file), ``profile`` (py-spy under load), ``counters`` with ``counted`` (GC and upstream
connections per call, counted inside the server), ``stacks`` (servers x upstream clients, edge probes),
``isolation`` (what isolating a verification costs) and ``cli`` (the arguments and the run).
"""
