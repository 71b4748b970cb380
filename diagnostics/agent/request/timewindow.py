"""Time windows in a question ("since Thursday", "in the last 2 hours", "between 10:00 and 11:00",
"yesterday", "since 2025-08-01"), parsed with dateparser and anchored on the question's or the alert's
own timestamp (``anchor``): never the wall clock of a replay.

The phrases are found by a few patterns (what the window is: a start, an end, both, one day); the dates
inside them are read by dateparser with ``RELATIVE_BASE`` set to the anchor, so "Thursday" is the
Thursday before the question was asked. ``window_params`` fills the window into whichever parameters a
tool takes (logs ``start_time``/``since``, events, PromQL ``start``/``end``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import dateparser

from core import number_words
from diagnostics.agent import rx

_SETTINGS: dict[str, Any] = {
    "PREFER_DATES_FROM": "past",
    "RETURN_AS_TIMEZONE_AWARE": True,
    "TIMEZONE": "UTC",
    "TO_TIMEZONE": "UTC",
}
_UNITS = {"second": 1, "minute": 60, "min": 60, "hour": 3600, "hr": 3600, "day": 86400, "week": 604800}
_END = r"(?:\s*(?:[,.?!;)]|$|\s(?:and|in|on|for|from|of|to|with|only|please|\?)\b))"  # consumed: one search
_DATE = r"([\w:+\-/. ]{2,40}?)"
_LAST_N = rx.compile(
    r"\b(?:in|over|during|for|within)?\s*(?:the\s+)?(?:last|past|previous)\s+(\d+|a|an|one|two|three|few)?\s*"
    r"(second|minute|min|hour|hr|day|week)s?\b",
    rx.IGNORECASE,
)
_BETWEEN = rx.compile(rf"\bbetween\s+{_DATE}\s+and\s+{_DATE}{_END}", rx.IGNORECASE)
_SINCE = rx.compile(rf"\b(?:since|after|starting(?: from)?)\s+{_DATE}{_END}", rx.IGNORECASE)
_UNTIL = rx.compile(rf"\b(?:until|till|before|up to)\s+{_DATE}{_END}", rx.IGNORECASE)
_DAY = rx.compile(
    r"\b(yesterday|today|this morning|last night|last week|this week|"
    r"on\s+(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|\d{4}-\d{2}-\d{2}|"
    r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d{1,2}(?:st|nd|rd|th)?))\b",
    rx.IGNORECASE,
)
_COUNTS = {**number_words.CARDINALS, "a": 1, "an": 1, "few": 3}  # _LAST_N's words
# Words that mean a time, never an object's name (the subject parser drops them).
TIME_WORDS = frozenset(
    """today yesterday tonight morning night week weeks month months day days hour hours minute minutes
    since until before after ago last past previous monday tuesday wednesday thursday friday saturday sunday
    january february march april may june july august september october november december jan feb mar apr
    jun jul aug sep sept oct nov dec utc""".split()
)


@dataclass(frozen=True)
class TimeWindow:
    start: datetime | None
    end: datetime | None
    phrase: str

    def contains(self, moment: datetime) -> bool:
        return (self.start is None or moment >= self.start) and (self.end is None or moment <= self.end)

    def label(self) -> str:
        def fmt(moment: datetime | None) -> str:
            return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "…"

        return f"{fmt(self.start)} to {fmt(self.end)} ({self.phrase})"

    def to_json(self) -> dict[str, Any]:
        return {
            "phrase": self.phrase,
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
        }


def _parse(text: str, anchor: datetime) -> datetime | None:
    text = text.strip().removeprefix("the ").strip()
    if not text or not rx.search(r"\d|[a-z]{3}", text, rx.IGNORECASE):
        return None
    found = dateparser.parse(text, settings={**_SETTINGS, "RELATIVE_BASE": anchor.replace(tzinfo=None)})
    if found is None:
        return None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def _day(moment: datetime) -> tuple[datetime, datetime]:
    start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return start, start + timedelta(days=1) - timedelta(seconds=1)


def parse_window(text: str, anchor: datetime) -> TimeWindow | None:
    """The time window ``text`` asks about, anchored on ``anchor`` (aware, UTC); None when it names none."""
    anchor = anchor if anchor.tzinfo else anchor.replace(tzinfo=UTC)
    # "since 09:12 on 2026-11-24" -> "since 2026-11-24 09:12"
    text = rx.sub(r"(\d{1,2}:\d{2}(?::\d{2})?)\s+on\s+(\d{4}-\d{2}-\d{2})", r"\2 \1", text)
    if match := _LAST_N.search(text):
        count = match.group(1) or "1"
        number = int(count) if count.isdigit() else _COUNTS.get(count.lower(), 1)
        seconds = number * _UNITS[match.group(2).lower()]
        return TimeWindow(anchor - timedelta(seconds=seconds), anchor, match.group(0).strip())
    if match := _BETWEEN.search(text):
        start, end = _parse(match.group(1), anchor), _parse(match.group(2), anchor)
        if start and end:
            return TimeWindow(min(start, end), max(start, end), match.group(0).strip())
    since, until = _SINCE.search(text), _UNTIL.search(text)
    start = _parse(since.group(1), anchor) if since else None
    end = _parse(until.group(1), anchor) if until else None
    if start and end is None and start > anchor:
        start -= timedelta(days=1)  # "since 10:00" asked at 04:43: yesterday's 10:00
    if start or end:
        phrase = " ".join(m.group(0).strip() for m in (since, until) if m)
        # "since X" runs up to now: open-ended, so nothing logged after the anchor is cut off.
        return TimeWindow(start, end, phrase)
    if match := _DAY.search(text):
        word = match.group(1).lower()
        if word in ("last week", "this week"):
            return TimeWindow(anchor - timedelta(days=7), anchor, word)
        if word == "today" or word == "this morning":
            return TimeWindow(_day(anchor)[0], anchor, word)
        if word == "last night":
            start = _day(anchor)[0] - timedelta(hours=6)
            return TimeWindow(start, start + timedelta(hours=12), word)
        moment = _parse(word.removeprefix("on "), anchor)
        if moment is not None:
            day_start, day_end = _day(moment)
            return TimeWindow(day_start, min(day_end, anchor) if day_start <= anchor else day_end, word)
    return None


# A bound ahead of the question ("expiring in the next 30 days", "within 2 weeks", "in 48h", "this month",
# "before 2027-01-15", "by Friday"): when something is due, not when it was seen.
_AHEAD_COUNTS = {**_COUNTS, "couple of": 2, "couple": 2, "several": 3}
_AHEAD_UNIT = {
    "h": "hour",
    "hr": "hour",
    "hrs": "hour",
    "d": "day",
    "w": "week",
    "wk": "week",
    "wks": "week",
    "mo": "month",
    "mos": "month",
    "y": "year",
    "yr": "year",
    "yrs": "year",
}
_AHEAD = rx.compile(
    r"\b(?:(?:in|within|during|over|for|inside)\s+(?:the\s+|a\s+)?(?:next|coming|following|upcoming)?|"
    rf"next|coming)\s*(\d{{1,4}}|a|an|{'|'.join(number_words.SMALL)}|"
    r"couple(?:\s+of)?|few|several)?\s*"
    r"(hours?|hrs?|h|days?|d|weeks?|wks?|w|fortnights?|months?|mos?|years?|yrs?|y)\b",
    rx.IGNORECASE,
)
_AHEAD_END_OF = rx.compile(
    r"\b(?:by|before|until|till|at|in)\s+(?:the\s+)?end\s+of\s+(?:the\s+)?(this\s+|next\s+)?(week|month|year)\b",
    rx.IGNORECASE,
)
_AHEAD_CALENDAR = rx.compile(
    r"\b(this|next)\s+(week|month|year)\b|\b(today|tonight|tomorrow)\b", rx.IGNORECASE
)
_AHEAD_DATE = rx.compile(
    rf"\b(before|by|until|till|prior to|no later than|ahead of)\s+{_DATE}{_END}", rx.IGNORECASE
)


def _months_after(moment: datetime, months: int) -> datetime:
    month = moment.month - 1 + months
    year, month = moment.year + month // 12, month % 12 + 1
    last = (datetime(year + month // 12, month % 12 + 1, 1, tzinfo=moment.tzinfo) - timedelta(days=1)).day
    return moment.replace(year=year, month=month, day=min(moment.day, last))


def _period_end(anchor: datetime, unit: str, ahead: int) -> datetime:
    """The end of this (``ahead`` 0) or the next (1) week, month or year after ``anchor``."""
    day = anchor.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "week":
        start = day - timedelta(days=day.weekday()) + timedelta(days=7 * (ahead + 1))
    elif unit == "month":
        start = _months_after(day.replace(day=1), ahead + 1)
    else:
        start = day.replace(month=1, day=1, year=day.year + ahead + 1)
    return start - timedelta(seconds=1)


def horizon(text: str, anchor: datetime) -> TimeWindow | None:
    """The bound ahead of ``anchor`` that ``text`` asks about ("which certificates expire in the next 30
    days", "within 2 weeks", "before 2027-01-15", "by the end of the month"), as the window from ``anchor``
    to it; None when the text names no bound ahead (a window in the past is ``parse_window``'s)."""
    anchor = anchor if anchor.tzinfo else anchor.replace(tzinfo=UTC)
    if match := _AHEAD_END_OF.search(text):
        ahead = 1 if (match.group(1) or "").strip().lower() == "next" else 0
        return TimeWindow(anchor, _period_end(anchor, match.group(2).lower(), ahead), match.group(0).strip())
    if match := _AHEAD.search(text):
        count = (match.group(1) or "1").lower()
        number = int(count) if count.isdigit() else _AHEAD_COUNTS.get(count.split()[0], 1)
        unit = match.group(2).lower()
        unit = _AHEAD_UNIT.get(unit, unit.rstrip("s"))
        if unit in ("month", "year"):
            end = _months_after(anchor, number * (12 if unit == "year" else 1))
        else:
            end = anchor + timedelta(seconds=number * {"fortnight": 14 * 86400, **_UNITS}[unit])
        return TimeWindow(anchor, end, match.group(0).strip())
    if match := _AHEAD_CALENDAR.search(text):
        which, unit, day = (g.lower() if g else "" for g in match.groups())
        if day:
            start = _day(anchor)[0] + timedelta(days=1 if day == "tomorrow" else 0)
            return TimeWindow(anchor, start + timedelta(days=1) - timedelta(seconds=1), day)
        return TimeWindow(
            anchor, _period_end(anchor, unit, 1 if which == "next" else 0), match.group(0).strip()
        )
    if match := _AHEAD_DATE.search(text):
        said = match.group(2).strip().removeprefix("the ").strip()
        if not said or not rx.search(r"\d|[a-z]{3}", said, rx.IGNORECASE):
            return None
        base = {**_SETTINGS, "PREFER_DATES_FROM": "future", "RELATIVE_BASE": anchor.replace(tzinfo=None)}
        found = dateparser.parse(said, settings=base)
        if found is None:
            return None
        found = found if found.tzinfo else found.replace(tzinfo=UTC)
        if not rx.search(r"\d:\d", said):  # a day: "before" it is its start, "by" or "until" it its end
            found = (
                _day(found)[0]
                if match.group(1).lower() in ("before", "prior to", "ahead of")
                else _day(found)[1]
            )
        phrase = f"{match.group(1).lower()} {said}"
        return TimeWindow(anchor, found, phrase) if found > anchor else None
    return None


_PARAM_NAMES = {
    "start": ("start_time", "since", "start", "from", "after", "start_timestamp"),
    "end": ("end_time", "until", "end", "to", "before", "end_timestamp"),
}


def window_params(properties: dict[str, Any], window: TimeWindow | None) -> dict[str, Any]:
    """The window as the parameters a tool's schema (``properties``) takes: RFC 3339 strings, or Unix
    seconds where the parameter is a number. Empty when the tool takes no window."""
    if window is None:
        return {}
    params: dict[str, Any] = {}
    for side, names in _PARAM_NAMES.items():
        moment = window.start if side == "start" else window.end
        if moment is None:
            continue
        for name in names:
            schema = properties.get(name)
            if isinstance(schema, dict):
                numeric = schema.get("type") in ("integer", "number")
                params[name] = int(moment.timestamp()) if numeric else moment.strftime("%Y-%m-%dT%H:%M:%SZ")
                break
    return params


_STAMP = rx.compile(
    r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s?(?:Z|UTC|[+-]\d{2}:?\d{2})?)"
    r"|\"(?:time|ts|timestamp)\"\s*:\s*\"?(\d{10,13}(?:\.\d+)?)"
)


def line_time(line: str) -> datetime | None:
    """The timestamp a log line starts with (ISO 8601, ``YYYY-MM-DD HH:MM:SS``, or a JSON ``time`` in
    Unix seconds or milliseconds), in UTC; None when it has none."""
    match = _STAMP.search(line[:400])
    if not match:
        return None
    if match.group(2):
        value = float(match.group(2))
        value = value / 1000 if value > 1e11 else value
        return datetime.fromtimestamp(value, tz=UTC)
    raw = match.group(1).replace(",", ".").replace(" UTC", "Z").replace("UTC", "Z").strip()
    raw = raw.replace(" ", "T", 1) if rx.match(r"\d{4}-\d{2}-\d{2} \d", raw) else raw
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# A line that names a moment still to come (a certificate's ``notAfter``, its ``renewalTime``, an expiry, a
# CronJob's next run) says when something is due, not when it was seen.
_SCHEDULED = rx.compile(
    r"(?i)\b(?:not\s?after|not_after|renewal\s?time|renew_after|expir\w*|valid\s?(?:until|to)|"
    r"next\s?schedule\w*|enddate)\b"
)


def latest_time(texts: list[str]) -> datetime | None:
    """The latest moment ``texts`` saw (e.g. what a replay's recordings saw last); None when none. A line
    naming a moment to come (an expiry, a renewal, a next run) is not a moment seen."""
    latest: datetime | None = None
    for text in texts:
        for line in text.splitlines():
            moment = line_time(line)
            if moment is not None and _SCHEDULED.search(line[:200]):
                continue
            if moment is not None and (latest is None or moment > latest):
                latest = moment
    return latest


@dataclass(frozen=True)
class EvidenceWindow:
    """From when evidence counts (``evidence.freshness``): what was true only before ``since``
    is history; ``reason`` says what the start is (the incident's window, the last executed fix)."""

    since: datetime | None = None
    reason: str = ""

    def to_json(self) -> dict[str, str]:
        return {"since": iso(self.since) if self.since else "", "reason": self.reason}


def iso(moment: datetime) -> str:
    """``moment`` as ISO 8601 in UTC, to the second."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
