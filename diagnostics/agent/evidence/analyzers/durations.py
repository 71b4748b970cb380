"""What a duration in a log line measures: a request served, or a piece of work done.

A service logs two kinds of duration. Serving a request ('GET /cart 200 in 2.3 s', 'slow query took
1.2 s', 'Page rendered in 9 seconds', 'rpc Charge responded in 2 s'): each is a caller waiting, and slow
ones are latency. Finishing a piece of work ('batch 4471 done in 29s', 'migration 0042 finished in 12 s',
'backup completed in 40 s', 'cron cleanup finished after 41s'): a job's, step's or batch's own run time,
which no caller waits on as a request; however long it is, it is not latency. A line shows which by what
it names. A method and path, an HTTP status, a 'slow request' marker or a latency field: served, whatever
else it says. Otherwise the words of work (job, step, batch, cron, migration, backup, task...): work.
Otherwise the words of serving (request, query, call, rpc, response, page, handler...): served. A line
that shows neither is unknown, and unknown is not latency.
"""

from __future__ import annotations

from diagnostics.agent import rx

SERVED, WORK, UNKNOWN = "served", "work", "unknown"

# A request by its protocol: a method and a path, an HTTP version, a status code ('status=200',
# '"statusCode":503', an access line's '" 200 '), the service's own slow-request marker, or a JSON
# field that is a response's time.
_REQUEST = rx.compile(
    r"\b(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS)\s+/|\bHTTP/\d|"
    r"\b(?:http[_ ]?)?status(?:[_ ]?code)?\"?\s*[=:]?\s*\"?[1-5]\d\d\b|\"\s[1-5]\d\d\s|"
    r"\bslow (?:requests?|quer(?:y|ies)|calls?|rpcs?|responses?|statements?)\b|"
    r"\"(?:responseTime|response_time|latency_ms|latency)\"",
    rx.IGNORECASE,
)
# A run of work that finishes: its own duration is its report, not a caller's wait.
_WORK = rx.compile(
    r"\b(?:jobs?|steps?|stages?|phases?|batch(?:es)?|cron\w*|migrations?|migrated|backups?|snapshots?|"
    r"compactions?|sync(?:ed|ing|hroni[sz]ation)?|tasks?|builds?|imports?|exports?|re-?index\w*|"
    r"restores?|vacuum\w*|checkpoints?|epochs?|iterations?|uploads?|downloads?|cleanups?|scans?|"
    r"reports?|warm-?up|startup|boot(?:ed|strap)?|initiali[sz]\w*|flush(?:ed)?|rotations?|deploy\w*|"
    r"rollouts?|reconcil\w*|pipelines?|chunks?|sweeps?|compil\w*|seed(?:ed|ing)?|workflows?|"
    r"schedule[dr]?|replay(?:ed)?|refresh(?:ed)?|rebuil[dt]|archiv\w*|purge[ds]?)\b",
    rx.IGNORECASE,
)
# The words of serving: what a caller asks for and waits on.
_SERVING = rx.compile(
    r"\b(?:requests?|responses?|responded|quer(?:y|ies)|rpcs?|grpc|calls?|handlers?|endpoints?|routes?|"
    r"pages?|rendered|served|http|sql|statements?)\b",
    rx.IGNORECASE,
)


def measured(line: str) -> str:
    """``SERVED``, ``WORK`` or ``UNKNOWN``: what the duration a log line reports measures."""
    if _REQUEST.search(line):
        return SERVED
    if _WORK.search(line):
        return WORK
    if _SERVING.search(line):
        return SERVED
    return UNKNOWN
