"""Observability: the /metrics endpoint (views), the gateway's per-call metrics (calls) and the gauges of
the service's state read at each scrape (state). Dashboard: infra/grafana/skillgate.json."""
