"""The training report's plots, drawn with matplotlib (imported when a report is drawn, without a display)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_tfos.runtime.report.collect import BOOKKEEPING, RunRecord

log = logging.getLogger(__name__)

_PANELS = 4


@dataclass(frozen=True)
class Plot:
    """One image of the report."""

    name: str
    title: str
    caption: str


def render_plots(record: RunRecord, out_dir: str) -> tuple[list[Plot], list[str]]:
    """Draw every plot there is data for into ``out_dir``; return them, and why any could not be drawn."""
    drawers: list[tuple[str, str, str, Callable]] = [
        ("metrics.png", "Loss and metrics", "Keras's running mean within each epoch; markers: epoch ends.", _metrics),
        ("step_times.png", "Step times per node", "Median and 90th percentile per epoch, first steps aside.", _steps),
        ("feed.png", "Data fed from Spark", "Rows each node read from Spark, and how fast.", _feed),
        ("timeline.png", "Timeline", "Applications, attempts, checkpoints, failures, restores, export.", _timeline),
        ("memory.png", "Peak memory per node", "Peak resident memory of each TF node process.", _memory),
    ]
    plots, problems = [], []
    for name, title, caption, draw in drawers:
        try:
            figure = draw(record)
            if figure is None:
                continue
            figure.savefig(os.path.join(out_dir, name), format="png", dpi=100)
            plots.append(Plot(name, title, caption))
        except Exception as exc:  # one odd event must not cost the whole report
            log.warning("cannot draw %s: %s", name, exc, exc_info=True)
            problems.append(f"{title}: {exc}")
    return plots, problems


def _figure(width: float = 9.0, height: float = 4.0):
    from matplotlib.figure import Figure  # no pyplot: no display, no global state

    return Figure(figsize=(width, height), layout="constrained")


def _metric_names(events: list[dict[str, Any]]) -> list[str]:
    names: dict[str, None] = {}
    for event in events:
        for key, value in event.items():
            if key not in BOOKKEEPING and isinstance(value, int | float) and not isinstance(value, bool):
                names[key] = None
    return list(names)


def _metrics(record: RunRecord):
    points, epochs = record.of("step_metrics"), record.of("metrics")
    names = _metric_names(points + epochs)
    if not names:
        return None
    bases = list(dict.fromkeys(n.removeprefix("val_") for n in names))
    bases.sort(key=lambda n: (n != "loss", n))
    bases = bases[:_PANELS]
    figure = _figure(9.0, 3.2 * len(bases))
    axes = figure.subplots(len(bases), 1, squeeze=False)[:, 0]
    restores = [e["step"] for e in record.of("restore") if isinstance(e.get("step"), int)]
    for ax, base in zip(axes, bases, strict=True):
        label = "training"  # one line per attempt (a retry trains some steps again), labelled once
        for attempt in sorted({p.get("attempt", 0) for p in points}):
            mine = [p for p in points if p.get("attempt", 0) == attempt and p.get(base) is not None]
            if mine:
                mine.sort(key=lambda p: p["step"])
                ax.plot([p["step"] for p in mine], [p[base] for p in mine], color="tab:blue", lw=1.2, label=label)
                label = None
        for name, color, marker in ((base, "tab:blue", "o"), (f"val_{base}", "tab:orange", "s")):
            mine = sorted((e for e in epochs if e.get(name) is not None), key=lambda e: e["step"])
            if mine:
                label = "validation (epoch end)" if name.startswith("val_") else "training (epoch end)"
                style = "--" if name.startswith("val_") else ""
                ax.plot([e["step"] for e in mine], [e[name] for e in mine], style + marker, color=color, label=label)
        for i, step in enumerate(restores):
            ax.axvline(step, color="grey", ls=":", lw=1, label="restored checkpoint" if i == 0 else None)
        ax.set_ylabel(base)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("global step")
    return figure


def _steps(record: RunRecord):
    events = record.of("worker_steps")
    if not events:
        return None
    figure = _figure()
    ax = figure.subplots()
    workers = sorted({e["worker"] for e in events})
    colors = _colors(len(workers))
    for worker, color in zip(workers, colors, strict=True):
        mine = [e for e in events if e["worker"] == worker]
        steps = [e["step"] for e in mine]
        ax.plot(steps, [1000 * e["p50_secs"] for e in mine], "-o", color=color, ms=4, label=f"{worker} median")
        ax.plot(steps, [1000 * e["p90_secs"] for e in mine], "--", color=color, lw=1, label=f"{worker} p90")
    ax.set_xlabel("global step at the epoch's end")
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small", ncol=2)
    return figure


def _feed(record: RunRecord):
    # Direct reads of Parquet files carry no rate: the TF process reads while it trains, not before.
    timed = [e for e in record.of("feed") if e.get("rows_per_sec") is not None]
    events = sorted(timed, key=lambda e: (e.get("attempt", 0), str(e.get("worker"))))
    if not events:
        return None
    figure = _figure(9.0, 1.0 + 0.45 * len(events))
    ax = figure.subplots()
    labels = [f"{e.get('worker')} attempt {e.get('attempt', 0)}" for e in events]
    rates = [e.get("rows_per_sec") or 0.0 for e in events]
    bars = ax.barh(range(len(events)), rates, color="tab:green")
    ax.set_yticks(range(len(events)), labels)
    ax.invert_yaxis()
    for bar, event in zip(bars, events, strict=True):
        ax.annotate(
            f" {event.get('rows', 0):,} rows in {event.get('seconds') or 0:.1f} s",
            (bar.get_width(), bar.get_y() + bar.get_height() / 2),
            va="center",
            fontsize="small",
        )
    ax.set_xlabel("rows per second, read from Spark and spilled to local disk")
    ax.set_xlim(right=max([*rates, 1.0]) * 1.45)
    return figure


_LANES = ("applications", "attempts", "checkpoints", "restores", "failures", "export")


def _timeline(record: RunRecord):
    kinds = (
        "application",
        "application_end",
        "attempt",
        "attempt_failed",
        "failed",
        "stopped",
        "checkpoint",
        "restore",
        "warm_start",
        "warm_start_missing",
        "export",
    )
    events = record.of(*kinds)
    if not events:
        return None
    ends = [e for e in record.events if e.get("time")]
    t0, t_end = min(e["time"] for e in ends), max(e["time"] for e in ends)
    figure = _figure(9.0, 3.6)
    ax = figure.subplots()
    lane = {name: i for i, name in enumerate(_LANES)}

    def x(event):
        return event["time"] - t0

    starts = record.of("application")
    for i, start in enumerate(starts):
        end = next(
            (e for e in record.of("application_end") if e.get("application_id") == start.get("application_id")), None
        )
        stop = x(end) if end else (x(starts[i + 1]) if i + 1 < len(starts) else t_end - t0)
        ok = end is not None and end.get("exit_code") == 0
        ax.broken_barh(
            [(x(start), max(stop - x(start), 0.01))],
            (lane["applications"] - 0.3, 0.6),
            color="tab:green" if ok else "tab:red",
            alpha=0.5,
        )
        ax.annotate(f" {start.get('application_id')}", (x(start), lane["applications"]), va="center", fontsize=7)
    attempts = record.of("attempt")
    failed = {(e.get("run_id"), e.get("attempt")) for e in record.of("attempt_failed")}
    run_failed = record.of("failed")
    for attempt in attempts:
        later = [
            e for e in record.events if e["time"] > attempt["time"] and e.get("kind") in ("attempt", "application_end")
        ]
        stop = x(later[0]) if later else t_end - t0
        bad = (attempt.get("run_id"), attempt.get("attempt")) in failed or any(
            attempt["time"] < e["time"] <= t0 + stop + 1e-6 for e in run_failed
        )
        ax.broken_barh(
            [(x(attempt), max(stop - x(attempt), 0.01))],
            (lane["attempts"] - 0.3, 0.6),
            color="tab:red" if bad else "tab:blue",
            alpha=0.5,
        )
        ax.annotate(f" #{attempt.get('attempt')}", (x(attempt), lane["attempts"]), va="center", fontsize=7)
    marks = [
        ("checkpoint", "checkpoints", "|", "tab:blue", "checkpoint"),
        ("restore", "restores", "^", "tab:green", "restore"),
        ("warm_start", "restores", "D", "tab:purple", "warm start"),
        ("warm_start_missing", "restores", "d", "tab:grey", "warm start: no model"),
        ("attempt_failed", "failures", "x", "tab:red", "attempt failed"),
        ("failed", "failures", "X", "darkred", "run failed"),
        ("stopped", "failures", "s", "tab:orange", "stopped"),
        ("export", "export", "*", "goldenrod", "export"),
    ]
    for kind, where, marker, color, label in marks:
        mine = record.of(kind)
        if mine:
            ax.scatter(
                [x(e) for e in mine], [lane[where]] * len(mine), marker=marker, color=color, s=60, label=label, zorder=3
            )
    checkpoints = record.of("checkpoint")
    if len(checkpoints) <= 12:
        for event in checkpoints:
            ax.annotate(str(event.get("step")), (x(event), lane["checkpoints"] - 0.22), fontsize=7, ha="center")
    ax.set_yticks(range(len(_LANES)), _LANES)
    ax.set_ylim(len(_LANES) - 0.5, -0.5)
    ax.set_xlabel("seconds since the first event")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return figure


def _memory(record: RunRecord):
    events = sorted(record.of("node_memory"), key=lambda e: (e.get("attempt", 0), str(e.get("worker"))))
    if not events:
        return None
    figure = _figure(9.0, 1.0 + 0.45 * len(events))
    ax = figure.subplots()
    labels = [f"{e.get('worker')} attempt {e.get('attempt', 0)}" for e in events]
    values = [e.get("peak_rss_mb") or 0.0 for e in events]
    colors = ["tab:purple" if e.get("ok", True) else "tab:red" for e in events]
    bars = ax.barh(range(len(events)), values, color=colors)
    ax.set_yticks(range(len(events)), labels)
    ax.invert_yaxis()
    for bar, event in zip(bars, events, strict=True):
        note = "" if event.get("ok", True) else " (failed)"
        ax.annotate(
            f" {event.get('peak_rss_mb') or 0:,.0f} MiB{note}",
            (bar.get_width(), bar.get_y() + 0.4),
            va="center",
            fontsize="small",
        )
    ax.set_xlabel("peak resident memory (MiB)")
    ax.set_xlim(right=max([*values, 1.0]) * 1.3)
    return figure


def _colors(count: int) -> list:
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    return [palette(i % 10) for i in range(count)]
