"""What was asked, read before anything is looked at: the alert's subject (``subject``, ``names``), the
question's intent and slots (``intent``) and its time window (``timewindow``). No tool calls, no LLM."""
