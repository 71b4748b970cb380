"""The diagnosis agent (design.md section 4): roles are enforced by the objects each one holds.

- ``probe.Probe`` holds only ReadToolsets;
- ``analyzers`` turn raw tool output into findings, deterministically;
- ``compressor`` summarizes raw output for the Observer under a token budget;
- ``observer`` (LLM through the gateway) and ``planner`` (no LLM) decide the next step; with a model
  capable of native tool calls, ``tool_agent`` continues after the planner and ``evidence`` checks its
  answer;
- ``executor.Executor`` is the only holder of WriteToolsets;
- ``runner`` wires them for one investigation and hands every step to a ``Recorder``.

Plain Python, no ORM (import-linter holds it): the agent talks to the outside through the
``runner.Recorder`` and ``executor.ActionLedger`` it is given and plain values (alert, environment,
admitted skills). The incidents app persists what it does (``diagnostics.recording``).
"""
