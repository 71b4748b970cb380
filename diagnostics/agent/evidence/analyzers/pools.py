"""A client-side connection pool too small for the concurrency that uses it.

Each request thread of an application server (Puma, Gunicorn, Tomcat...) checks a database connection out
of the process's pool; when the server runs more threads than the pool has connections, the extra
requests wait for one and fail after the pool's checkout timeout (ActiveRecord's ConnectionTimeoutError,
HikariCP's "Connection is not available", SQLAlchemy's "QueuePool limit ... reached", Knex's "Timeout
acquiring a connection"), while the database itself has connections to spare. The configuration (pool
size and thread count, usually environment variables) is in the workload's describe; the errors in its
log; the database's headroom in its exporter's gauges.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.server_states import iso, line_time, pod_of, samples_of
from diagnostics.agent.findings import Finding, Severity

_EXHAUSTED = rx.compile(
    r"could not obtain a connection from the pool|all pooled connections were in use|"
    r"Connection is not available, request timed out|QueuePool limit of size \d+[^\n]*reached|"
    r"Timeout acquiring a connection|ConnectionAcquireTimeoutError|pool (?:is )?exhausted|"
    r"timed out waiting for a (?:free )?connection",
    rx.IGNORECASE,
)
_ERROR_CLASS = rx.compile(r"\b((?:[A-Z]\w*::|[a-z]\w*\.)*[A-Z]\w*(?:Error|Exception|Timeout))\b")
_POOL_VAR = rx.compile(
    r"^\s*([A-Z_]*POOL(?:_SIZE|_MAX|_MAX_SIZE)?|[A-Z_]*MAXIMUM_POOL_SIZE|maximumPoolSize|pool_size)\s*[:=]\s*(\d+)\s*$",
    rx.MULTILINE,
)
_THREAD_VAR = rx.compile(
    r"^\s*([A-Z_]*MAX_THREADS|[A-Z_]*THREADS(?:_MAX)?|[A-Z_]*THREAD_COUNT)\s*[:=]\s*(\d+)\s*$", rx.MULTILINE
)
_LOG_THREADS = rx.compile(r"Max threads:\s*(\d+)|threads?[=: ]+(\d+)\b", rx.IGNORECASE)
_SERVER = rx.compile(r"\b(Puma|Gunicorn|Unicorn|uWSGI|Tomcat|Jetty|Undertow|Falcon|Passenger)\b")


@register
class ConnectionPoolAnalyzer(Analyzer):
    name = "connection_pool_exhausted"

    def applies(self, out: ToolOutput) -> bool:
        return bool(
            _POOL_VAR.search(out.text)
            or "max_connections" in out.text
            or (out.is_log and _EXHAUSTED.search(out.text))
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        pool = state.fact_dict("client_pool")
        if (size := _POOL_VAR.search(out.text)) and (threads := _THREAD_VAR.search(out.text)):
            pool.update(
                pool=(size.group(1), int(size.group(2))), threads=(threads.group(1), int(threads.group(2)))
            )
        spare = self._headroom(out)
        if spare:
            pool["spare"] = spare
        if not out.is_log:
            return self._spare_finding(state) if spare and pool.get("exhausted") else []
        lines = out.text.splitlines()
        hits = [ln for ln in lines if _EXHAUSTED.search(ln)]
        if not hits:
            return []
        pool["exhausted"] = True
        error = _ERROR_CLASS.search(hits[-1])
        name = error.group(1) if error else "a pool timeout"
        server = _SERVER.search(out.text)
        runs = server.group(1) if server else "The application server"
        configured = pool.get("threads"), pool.get("pool")
        if all(configured) and configured[1][1] < configured[0][1]:  # type: ignore[index]
            (thread_var, thread_n), (pool_var, pool_n) = configured  # type: ignore[misc]
            cause = (
                f"{runs} runs {thread_n} threads per worker ({thread_var}) but the connection pool has "
                f"{pool_n} connections ({pool_var}), so requests wait for a connection and fail with {name}"
            )
        else:
            logged = _LOG_THREADS.search(out.text)
            count = next((g for g in (logged.groups() if logged else ()) if g), "")
            cause = (
                f"{runs} runs {count + ' ' if count else 'more '}threads per worker "
                "than its connection pool has "
                f"connections, so requests wait for a connection and fail with {name}"
            )
        headroom = f"; {pool['spare']}" if pool.get("spare") else ""
        who = pod_of(out)
        return [
            Finding(
                "connection_pool_exhausted",
                f"{cause} ({len(hits)} in the log of {who or 'the application'}){headroom}.",
                Severity.CRITICAL,
                f"pod/{who}" if who else "",
                clip(hits[-1], 200),
                87,
                "Make the connection pool at least as large as the threads that share it (per process), "
                "within the database's max_connections; or run fewer threads.",
                at=iso(line_time(hits[-1])),
            )
        ]

    @staticmethod
    def _headroom(out: ToolOutput) -> str:
        """'PostgreSQL has connections to spare (30 of 400 in use)' from the database's exporter."""
        samples = samples_of(out, ("pg_stat_activity_count", "pg_settings_max_connections", "mysql_global_"))
        used = {"PostgreSQL": 0.0, "MySQL": 0.0}
        limit: dict[str, float] = {}
        for s in samples:
            if s.name == "pg_stat_activity_count":
                used["PostgreSQL"] += s.value
            elif s.name == "pg_settings_max_connections":
                limit["PostgreSQL"] = s.value
            elif s.name == "mysql_global_status_threads_connected":
                used["MySQL"] += s.value
            elif s.name == "mysql_global_variables_max_connections":
                limit["MySQL"] = s.value
        for db, maximum in limit.items():
            if maximum and used[db] / maximum < 0.8:
                return f"{db} has connections to spare ({used[db]:.0f} of {maximum:.0f} in use)"
        return ""

    @staticmethod
    def _spare_finding(state: AnalysisState) -> list[Finding]:
        spare = str(state.fact_dict("client_pool").get("spare") or "")
        return [
            Finding(
                "database_connections_spare",
                f"{spare}: the requests wait on the application's own connection pool, not on the database.",
                Severity.WARNING,
                "",
                spare,
                60,
            )
        ]
