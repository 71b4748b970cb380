"""Deciding what to read next and what it means: ``probe`` (ReadToolsets only), ``planner`` (rules, no
LLM), ``observer`` and ``tool_agent`` (an LLM through the gateway, ``llm``), ``params`` (tool arguments),
``adapt`` (the next form of an empty or failed read), ``skills`` (admitted skills matched to the incident)
and ``diagnosis`` (the findings ranked into a report)."""
