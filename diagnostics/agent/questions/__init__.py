"""Answering a question instead of an alert: ``planner`` (the reads a question needs), ``compose`` (the
answer for an intent, from ``reads``, ``restarts``, ``timeline``, ``changes``, ``events``), ``answers``
(the answer shapes) and ``replies`` (what the runner sends back)."""
