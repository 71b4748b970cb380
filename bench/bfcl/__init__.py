"""BFCL (Berkeley Function Calling Leaderboard v4) as a tool-call task set.

``data`` loads the items the repository carries (``eval/bfcl/``), ``requests`` turns an item into an
OpenAI chat request (function docs as ``tools``), ``checker`` judges an answer with BFCL's matching
rules against the possible answers, ``split`` assigns train / calibration / held-out by hash, and
``build`` regenerates the data from the ``bfcl-eval`` package. Plain Python: no Django.
"""
