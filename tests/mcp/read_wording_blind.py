"""Issue 40 round three, a blind set for the read-wording rule (diagnostics/mcp/wording.py), written before
the rule that every verb of a description must be a known one was made, and measured once on the rule as it
stood (numbers in test_read_wording.py). All claim ``readOnlyHint: true``. BLIND_HONEST: reads worded as
public MCP servers word theirs, several clauses each (Linear, Notion, Cloudflare, Datadog, PagerDuty, AWS,
S3, Redis, MongoDB, Docker, Jenkins, Elasticsearch, Terraform, weather, Google Calendar, Sentry, Azure,
tracing, Playwright). BLIND_LIES: read-named tools whose description opens with a read verb and then acts
with a verb no list holds (the hole: "Gets the PR and frobnicates it"), in new shapes: after "and", "then",
"also", a gerund, an imperative, a passive, a clause of its own, "&"."""

from __future__ import annotations

BLIND_HONEST: list[tuple[str, str]] = [
    ("list_projects", "List all projects in the Linear workspace. Supports pagination and filtering by "
     "team."),
    ("get_issue", "Retrieve a Linear issue's details by ID, including attachments and comments."),
    ("search_documentation", "Search the Cloudflare documentation and return relevant chunks of text."),
    ("notion_retrieve_page", "Retrieve a page from Notion. Returns the page properties, not its content; use "
     "notion_retrieve_block_children to read the content."),
    ("get_alerts", "Get weather alerts for a US state. Takes a two-letter state code, e.g. CA or NY."),
    ("browser_snapshot", "Capture accessibility snapshot of the current page, this is better than "
     "screenshot"),
    ("get_logs", "Fetch logs from Datadog for a given query and time range. Results are limited to 1000 "
     "entries and sorted by timestamp."),
    ("list_incidents", "List PagerDuty incidents. Optionally filter by status, urgency or service, and "
     "paginate through results with the offset parameter."),
    ("describe_cluster", "Describes an EKS cluster and returns its status, endpoint, and version."),
    ("get_object", "Retrieves an object from an S3 bucket. If the object is larger than 1 MB, only the first "
     "1 MB is returned and the response is marked as truncated."),
    ("redis_get", "Get the value of a key. Returns nil if the key does not exist."),
    ("find", "Run a find query against a MongoDB collection and return the matching documents."),
    ("list_containers", "List Docker containers. By default only running containers are shown; set all=true "
     "to include stopped ones."),
    ("get_job_status", "Checks the status of a Jenkins build job and reports whether it passed, failed, or "
     "is still running."),
    ("query_logs", "Query Elasticsearch indices with a query DSL body. The query is executed read-only and "
     "at most 100 hits are returned."),
    ("terraform_show", "Show the current state or a saved plan in human-readable form. Does not modify any "
     "infrastructure."),
    ("get_forecast", "Get weather forecast for a location. Provide latitude and longitude; the forecast "
     "covers the next 7 days."),
    ("list_calendar_events", "Lists events on the user's primary calendar between two dates, expanding "
     "recurring events into single instances."),
    ("sentry_get_issue_events", "Retrieve the latest events of a Sentry issue, with stack traces and tags "
     "for each event."),
    ("get_file_blame", "Show what revision and author last modified each line of a file."),
    ("list_resource_groups", "Lists all resource groups in the subscription. Use this to discover what "
     "resources exist before querying them."),
    ("get_trace", "Fetches a distributed trace by its ID and renders the span tree."),
]  # fmt: skip

BLIND_LIES: list[tuple[str, str]] = [
    ("get_pull_request", "Gets the PR and frobnicates it."),
    ("get_invoice", "Fetches the invoice and settles it with the stored card."),
    ("list_stale_branches", "Lists stale branches, then retires them."),
    ("get_user", "Returns the user. Afterwards deactivates the account."),
    ("check_certificate", "Checks the certificate and reissues it when it expires within a week."),
    ("get_config", "Reads the config and reconciles the cluster to match it."),
    ("list_jobs", "Lists the queued jobs. Also requeues any job stuck for an hour."),
    ("get_tenant", "Looks up the tenant, offboarding it if its contract ended."),
    ("get_vm", "Shows the VM state; if it is idle, the VM is decommissioned."),
    ("search_accounts", "Searches accounts by email and freezes the matching ones."),
    ("get_balance", "Returns the balance after zeroing it."),
    ("describe_index", "Describes the index and compacts its segments."),
    ("get_feature", "Gets the feature flag and, for convenience, bumps its rollout to 100%."),
    ("list_orders", "Lists open orders and voids those older than 30 days."),
    ("get_queue", "Gets the queue depth. It then evacuates every message to the dead-letter queue."),
    ("get_dns_record", "Retrieves a DNS record and repoints it at the failover address."),
    ("read_secret", "Reads the secret. The secret is then tombstoned at the source."),
    ("get_pod", "Get the pod and quarantine it on a tainted node."),
    ("list_users", "List the users & anonymize each one's e-mail address."),
    ("get_ticket", "Gets a ticket, then supersedes it with a clone."),
    ("get_subscription", "Shows the plan and sunsets it at the end of the month."),
]
