"""Numbers said in words ("two adults", "the next five days"): one table for every part that reads them.

routing/verifiers/tool_grounding.py grounds a call's numbers in a conversation that says them in words,
diagnostics/agent/request/timewindow.py counts a window's units with them. Each adds its own words on
top (a frequency, "a few"); what a number word means is said here once.
"""

from __future__ import annotations

# "one" to "twelve": the words a count is said in (a pattern's alternatives, in order)
SMALL: tuple[str, ...] = (
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
)
CARDINALS: dict[str, int] = {
    "zero": 0,
    **{word: value for value, word in enumerate(SMALL, start=1)},
    "fifteen": 15,
    "twenty": 20,
    "thirty": 30,
    "fifty": 50,
    "hundred": 100,
    "thousand": 1000,
    "million": 1_000_000,
    "billion": 1_000_000_000,
}

__all__ = ["CARDINALS", "SMALL"]
