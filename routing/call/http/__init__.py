"""The gateway's HTTP client for upstream calls (routing/call/openai_client.py, routing/call/embeddings.py).

aiohttp's ``ClientSession``, one per event loop (:mod:`routing.call.http.pool`), chosen by measurement
(bench/upstream_client.py, bench/results/upstream_client.md): against the stub, a tenth of httpx's CPU
per call, and no pool scan per request (httpcore's grew with the connections). What the rest of
routing/call sees is this package's own small surface: :func:`~routing.call.http.exchange.post`
gives an :class:`~routing.call.http.exchange.Answer` (status, headers, a capped body, its chunks,
``close``), and every transport failure is a :class:`~routing.call.http.failures.TransportFailure`
that says whether the upstream may have received (and billed) the attempt; no aiohttp type leaves it.
"""
