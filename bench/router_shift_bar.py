"""Issue 38's bar on the shifted-mix benchmark (``bench/router_shift.py``): per stream, whether each
profile was served at its quality target, and at most ``BAR_OVER_ODDS`` over the router that knows each
call's true odds (``router_shift_watch.odds_router_cost``)."""

from __future__ import annotations

from dataclasses import dataclass

BAR_OVER_ODDS = 0.10  # issue 38's bar: at most 10% over the router that knows each call's true odds


@dataclass(frozen=True)
class Served:
    """What callers got on one profile's stream, as the bar judges it: after the replayed retrain where
    one was admitted, else as the drift watch served it."""

    profile: str
    stream: str  # "in-distribution", "shifted", "shifted, harder"
    meets: str  # "yes" | "within margin" | "**no**" (``served_margin``)
    vs_odds: float | None  # served cost over the odds router's (None: the records carry no odds)


def against_the_bar(served: list[Served], over: float = BAR_OVER_ODDS) -> list[str]:
    """The table of issue 38's bar per stream: how many profiles meet their target (a miss within the
    confidence margin counted apart), and how many are served at most ``over`` above the odds router,
    naming the others."""
    lines = [
        "| stream | profiles | target met | below it within the margin | below it beyond the margin "
        f"| served at most {over:.0%} over the odds router | over it |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for stream in dict.fromkeys(s.stream for s in served):
        rows = [s for s in served if s.stream == stream]
        over_it = [s for s in rows if s.vs_odds is not None and s.vs_odds > over + 1e-12]
        costed = sum(1 for s in rows if s.vs_odds is not None)
        names = ", ".join(f"{s.profile} {s.vs_odds:+.1%}" for s in over_it) or "—"
        lines.append(
            f"| {stream} | {len(rows)} | {sum(s.meets == 'yes' for s in rows)} | "
            f"{sum(s.meets == 'within margin' for s in rows)} | {sum(s.meets == '**no**' for s in rows)} | "
            f"{costed - len(over_it)} of {costed} | {names} |"
        )
    return lines


def meets_of(point: float, upper: float) -> str:
    """'yes' at or above the required rate, 'within margin' below it by less than the confidence margin
    (``served_margin``'s upper bound at or above 0), else '**no**'."""
    return "yes" if point >= -1e-12 else ("within margin" if upper >= 0 else "**no**")
