"""The diagnosis agent (design.md section 4): roles are enforced by the objects each one holds.

A package per job, importing downwards only (import-linter holds it):

- ``runner`` (and ``recorders``) wires the roles for one investigation and hands every step to a
  ``Recorder``;
- ``questions``: a question's reads and its answer (listing, count, timeline, changes, events...);
- ``investigation``: ``probe.Probe`` holds only ReadToolsets; ``observer`` (LLM through the gateway)
  and ``planner`` (no LLM) decide the next step; with a model capable of native tool calls,
  ``tool_agent`` continues after the planner; ``adapt`` retries an empty read in its next form;
  ``diagnosis`` ranks the findings into a report;
- ``execution``: ``executor.Executor`` is the only holder of WriteToolsets (independent of
  ``investigation``: nothing that decides what to read can write);
- ``evidence``: ``analyzers`` turn raw tool output into findings, deterministically; ``inventory``,
  ``freshness`` (current vs history), ``logtemplates``, ``compressor``, ``claims`` (an LLM's answer
  checked against the evidence);
- ``request``: what was asked (the alert's subject, the question's intent and window);
- ``findings``: the vocabulary every layer shares.

Plain Python, no ORM (import-linter holds it): the agent talks to the outside through the
``runner.Recorder`` and ``execution.executor.ActionLedger`` it is given and plain values (alert,
environment, admitted skills). The incidents app persists what it does (``diagnostics.recording``).
"""
