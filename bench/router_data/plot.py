"""Cost-quality curves as a PNG (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

from routing.router.learning.evaluate import EvalReport


def plot_report(report: EvalReport, path: Path | str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))

    # Left: held-out calls, deployed policy (fallback included), cost vs pass rate.
    learned = report.test_curve
    left.plot(
        [p.cost_rel for p in learned],
        [p.pass_rate for p in learned],
        "-",
        color="C0",
        label="learned (all thresholds)",
    )
    prompt = report.prompt_curve
    left.plot(
        [p.cost_rel for p in prompt],
        [p.pass_rate for p in prompt],
        "-",
        color="C1",
        alpha=0.7,
        label="prompt-only (all thresholds)",
    )
    teacher, cascade = report.row("always-teacher"), report.row("cascade")
    left.plot(
        [cascade.cost_rel, teacher.cost_rel],
        [cascade.pass_rate, teacher.pass_rate],
        ":",
        color="grey",
        label="random share (expected)",
    )
    markers = {
        "learned": ("*", "C0", 16),
        "prompt-only": ("D", "C1", 8),
        "always-teacher": ("s", "k", 8),
        "cascade": ("o", "C2", 8),
        "random": ("x", "grey", 9),
        "oracle": ("P", "C3", 10),
        "bayes": ("v", "C4", 9),
    }
    for row in report.rows:
        key = next((k for k in markers if row.name.startswith(k)), None)
        if key is None:
            continue
        marker, color, size = markers[key]
        left.plot(
            row.cost_rel,
            row.pass_rate,
            marker,
            color=color,
            markersize=size,
            label=row.name,
            linestyle="none",
        )
    left.axhline(report.required_pass_rate, color="C3", linestyle="--", linewidth=1, label="quality target")
    left.set_xlabel("cost relative to always-teacher")
    left.set_ylabel("pass rate (correctness where known)")
    left.set_title(f"{report.name}: held-out calls")
    left.grid(alpha=0.3)
    left.legend(fontsize=7, loc="lower right")

    # Right: the calibration sweep that chose the threshold.
    cal = report.router.calibration
    thresholds = [min(p.threshold, 1.0) for p in cal.curve]
    right.plot(thresholds, [p.pass_rate for p in cal.curve], "-", color="C0", label="pass rate")
    right.plot(thresholds, [p.cost_rel for p in cal.curve], "-", color="C2", label="cost vs always-teacher")
    right.plot(thresholds, [p.teacher_share for p in cal.curve], ":", color="k", label="teacher share")
    right.plot(thresholds, [p.fallback_rate for p in cal.curve], ":", color="C1", label="fallback rate")
    right.axhline(cal.required_pass_rate, color="C3", linestyle="--", linewidth=1, label="required pass rate")
    right.axvline(
        min(cal.threshold, 1.0),
        color="C0",
        linestyle="--",
        linewidth=1,
        label=f"chosen t={cal.threshold:.3f}",
    )
    if report.max_p95_ms:
        twin = right.twinx()
        twin.plot(thresholds, [p.p95_ms for p in cal.curve], "-", color="C4", alpha=0.6, label="P95 ms")
        twin.axhline(report.max_p95_ms, color="C4", linestyle="--", linewidth=1)
        twin.set_ylabel("policy P95 latency (ms)")
        twin.legend(fontsize=7, loc="center right")
    right.set_xlabel("threshold (score >= t goes to the teacher)")
    right.set_title(f"calibration shard ({cal.n} calls): {'met' if cal.met else 'NOT met'}")
    right.grid(alpha=0.3)
    right.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
