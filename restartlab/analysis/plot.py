"""PNG figures (matplotlib, Agg backend, its bundled DejaVu font: no font setup needed)."""
import os

import matplotlib
from typing import List

from ..contracts import metric_keys as K
from ..contracts.phase_summary import PhaseSummary

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402



def _progress(ph):
    """(elapsed s, step) per attempt from the collector's thinned trace; no second read."""
    t0 = min((a.launch_ts for a in ph.attempts if a.launch_ts), default=None)
    lines = []
    for a in ph.attempts:
        if a.trace and t0 is not None:
            lines.append(([ts - t0 for ts, _ in a.trace], [it for _, it in a.trace], a))
    return t0, lines


KIND_STYLE = {"kill": ":", "node": "-.", "rank": "--", "hang": (0, (1, 4)), "preempt": "-"}
KIND_STYLE_NAME = {"kill": "dotted", "node": "dash-dot", "rank": "dashed", "hang": "sparse dots", "preempt": "solid"}


def _save(fig, out, name):
    p = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def progress_plot(phases, out):
    """Step against elapsed time per phase: kills dotted, resumes as dots."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    kinds_seen = set()
    for ph in phases:
        t0, lines = _progress(ph)
        color = None
        for i, (xs, ys, a) in enumerate(lines):
            (ln,) = ax.plot(xs, ys, color=color, label=ph.name if i == 0 else None)
            color = ln.get_color()
            if i > 0 and xs:
                ax.plot(xs[0], ys[0], "o", color=color, ms=4)
        for r in ph.injections:
            if r.struck and t0 and r.time is not None:
                kind = r.booked_kind
                ax.axvline(r.time - t0, color=color, ls=KIND_STYLE.get(kind, ":"), lw=0.9,
                           label=None if kind in kinds_seen else f"{kind} ({KIND_STYLE_NAME.get(kind, 'dotted')})")
                kinds_seen.add(kind)
    ax.set_xlabel("elapsed s (from the phase's first launch)")
    ax.set_ylabel("step")
    ax.set_title("progress: failures (vertical lines, by kind), resumes (dots)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return _save(fig, out, "progress.png")


def failures_plot(summaries: List[PhaseSummary], out):
    """Downtime and recompute of every failure, stacked."""
    evs = [(s.phase, e) for s in summaries for e in s.failures]
    if not evs:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{ph}#{e.attempt}" for ph, e in evs]
    down = [e.downtime_s or 0 for _, e in evs]
    rec = [e.recompute_s or 0 for _, e in evs]
    ax.bar(labels, down, label="downtime (kill -> first step)")
    ax.bar(labels, rec, bottom=down, label="recompute")
    ax.set_ylabel("seconds")
    ax.set_title("cost per failure")
    ax.legend()
    ax.tick_params(axis="x", rotation=45)
    return _save(fig, out, "failures.png")


def stalls_plot(phases, out):
    """Distribution of the seconds each save blocked the training loop."""
    data, labels = [], []
    for ph in phases:
        sync = ph.saves[K.SAVE_S]
        if sync:
            data.append(sync)
            labels.append(f"{ph.name}: sync save")
        stage, drain = ph.saves[K.STAGE_S], ph.saves[K.DRAIN_S]
        if stage:
            data.append([s + d for s, d in zip(stage, drain)] if len(drain) == len(stage) else stage)
            labels.append(f"{ph.name}: async stage+drain")
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.boxplot(data)
    ax.set_xticks(range(1, len(labels) + 1), labels)
    ax.set_yscale("log")
    ax.set_ylabel("seconds the training loop was blocked (log)")
    ax.set_title("save stalls")
    return _save(fig, out, "save_stalls.png")


def all_plots(phases, summaries: List[PhaseSummary], out):
    paths = [progress_plot(phases, out), failures_plot(summaries, out), stalls_plot(phases, out)]
    return [p for p in paths if p]
