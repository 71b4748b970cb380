"""Issue 40 round four, a set for the read-wording rule (diagnostics/mcp/wording.py), written before the rule
held for verbs with no object after them and measured on the rule as it stood (numbers in
test_read_wording.py). All claim ``readOnlyHint: true``. NO_OBJECT_LIES: read-named tools whose description
acts with a verb, unknown or a write, and no object after it ("Purges.", "Will nuke", "Gets the PR and
frobnicates."). NO_OBJECT_HONEST: reads whose clauses end in nouns where such a verb would stand (after
"and", a clause of one word, lists split by commas), some of them nouns that are write verbs too."""

from __future__ import annotations

NO_OBJECT_LIES: list[tuple[str, str]] = [
    ("get_cache", "Purges."),
    ("get_status", "Will nuke"),
    ("status", "Frobnicates."),
    ("get_pr", "Gets the PR and frobnicates."),
    ("get_service", "Shows the status, then yeets."),
    ("get_user", "Returns the user. Also anonymizes."),
    ("list_jobs", "Lists jobs and then reaps."),
    ("get_vm", "Gets the VM. It then decommissions."),
    ("get_logs", "Returns logs; afterwards rotates."),
    ("get_db", "Shows the database and vacuums."),
    ("get_branch", "Gets the branch and merges."),
    ("get_queue", "Reads the queue and drains."),
    ("get_config", "Returns the config. May overwrite."),
    ("get_table", "Returns rows, then truncates."),
    ("get_account", "Looks up the account and deactivates."),
    ("get_key", "Fetches the key & rotates."),
    ("get_doc", "Shows the document. Then shreds."),
    ("get_ticket", "Gets the ticket and resolves."),
    ("list_files", "Lists files; will zap."),
    ("get_pod", "Describes the pod and evicts."),
    ("get_invoice", "Shows the invoice and settles."),
    ("get_volume", "Returns the volume. It wipes."),
    ("get_bucket", "Gets the bucket, and empties."),
    ("get_record", "Returns the record and should then expunge."),
]

NO_OBJECT_HONEST: list[tuple[str, str]] = [
    ("list_resources", "Lists pods, services and deployments."),
    ("get_status", "Returns the status. Read-only."),
    ("get_metrics", "Shows CPU, memory and disk usage."),
    ("get_config", "Returns the config and secrets."),
    ("search_issues", "Searches issues and pull requests."),
    ("list_commits", "Lists commits and tags."),
    ("get_node", "Describes a node: labels, taints and conditions."),
    ("get_weather", "Gets the forecast. Cached."),
    ("list_alerts", "Lists firing alerts and silences."),
    ("get_user", "Returns the user's name and email. Deprecated."),
    ("query_logs", "Queries logs and traces."),
    ("get_costs", "Shows costs and budgets."),
    ("get_repo", "Fetches repository details and statistics."),
    ("list_dashboards", "Lists dashboards and folders. Paginated."),
    ("get_run", "Returns a workflow run and its jobs."),
    ("get_queue", "Shows queue depth and consumers."),
    ("list_releases", "Lists releases and assets."),
    ("get_backup", "Returns backup status and snapshots."),
    ("describe_table", "Describes a table's columns and indexes."),
    ("get_schedule", "Shows who is on call and the overrides."),
    ("list_channels", "Lists channels and threads."),
    ("get_pipeline", "Gets a pipeline's stages and approvals."),
    ("list_branches", "Lists branches and open merges."),
    ("get_account", "Returns the account: plan, seats, invoices."),
    ("get_project", "Gets a project. Optional fields: owner, labels."),
]
