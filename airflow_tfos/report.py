"""The training report: ``<run_dir>/report/report.html``, with the PNG plots it shows beside it.

Built from what the run directory holds (spec.json, status.json, events, the checkpoint manifest,
export/_SUCCESS, progress.json) by :func:`write_report`, which the driver calls at the end of every
training application, and by hand::

    python -m airflow_tfos.report --run-dir hdfs:///runs/digits/2026-11-22

Plots: loss and metrics over the global step (validation metrics at epoch ends), each training
node's step times, the rows each node got from Spark and how fast (InputMode.SPARK only), a
timeline of applications, attempts, checkpoints, failures, restores, warm start and export, and
each node's peak memory. The HTML is self-contained (no scripts, no external style sheets), and
every text in it is escaped.

Pure Python with matplotlib (imported when a report is drawn, rendering without a display); it
imports neither Airflow nor TensorFlow. The plots are drawn into a local temporary directory and
uploaded through the run directory's storage, the HTML last, so a reader never finds a page whose
images are missing.
"""

from __future__ import annotations

import argparse
import datetime
import html
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_tfos.rundir import REPORT_DIR, REPORT_HTML, RunDir, RunDirError

log = logging.getLogger(__name__)

#: Event kinds with many events each: counted in the event table, not listed.
BULK_KINDS = frozenset({"step_metrics", "metrics", "worker_steps", "feed", "node_memory"})
#: Event fields that are bookkeeping, not metrics.
_BOOKKEEPING = frozenset({"kind", "time", "step", "epoch", "attempt", "run_id", "worker"})
_PANELS = 4


class ReportError(RuntimeError):
    """The run directory holds nothing to report on; the message says what is missing."""


@dataclass
class RunRecord:
    """Everything the report reads from a run directory."""

    uri: str
    spec: dict[str, Any]
    status: dict[str, Any]
    events: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    export: dict[str, Any] | None
    progress: dict[str, Any] | None

    def of(self, *kinds: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("kind") in kinds]


@dataclass(frozen=True)
class Plot:
    """One image of the report."""

    name: str
    title: str
    caption: str


def collect(rundir: RunDir) -> RunRecord:
    """Read what the report shows from ``rundir``."""
    spec = rundir.read_spec() or {}
    status = rundir.read_status() or {}
    events = sorted(rundir.events(), key=lambda e: e.get("time", 0))
    if not spec and not status and not events:
        raise ReportError(f"{rundir.uri} has no spec.json, status.json or events: it is not a run directory")
    return RunRecord(
        uri=rundir.uri,
        spec=spec,
        status=status,
        events=events,
        checkpoints=rundir.checkpoint_history(),
        export=rundir.export_success(),
        progress=rundir.read_progress(),
    )


def write_report(rundir: RunDir | str) -> str:
    """Write ``report/report.html`` and its PNGs into the run directory; return the HTML's path."""
    rundir = RunDir(rundir) if isinstance(rundir, str) else rundir
    record = collect(rundir)
    with tempfile.TemporaryDirectory(prefix="airflow-tfos-report-") as scratch:
        plots, problems = render_plots(record, scratch)
        page = render_html(record, plots, problems)
        for plot in plots:
            with open(os.path.join(scratch, plot.name), "rb") as f:
                rundir.storage.write_bytes(rundir.path(REPORT_DIR, plot.name), f.read())
        rundir.storage.write_bytes(rundir.path(REPORT_HTML), page.encode("utf-8"))
    return rundir.path(REPORT_HTML)


# --- plots ---------------------------------------------------------------------------------------------


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
            if key not in _BOOKKEEPING and isinstance(value, int | float) and not isinstance(value, bool):
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
    events = sorted(record.of("feed"), key=lambda e: (e.get("attempt", 0), str(e.get("worker"))))
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


# --- HTML ----------------------------------------------------------------------------------------------

_STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1000px;
       color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } .uri { color: #555; font-family: monospace; margin-top: 0; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; } td, th { border: 1px solid #ddd; padding: 4px 8px;
       text-align: left; vertical-align: top; font-size: 0.92em; } th { background: #f4f4f4; }
.state { display: inline-block; padding: 2px 10px; border-radius: 4px; font-weight: bold; color: white;
       background: #777; } .SUCCEEDED { background: #2e7d32; } .FAILED { background: #c62828; }
.STOPPED, .STOPPING { background: #ef6c00; } .RUNNING, .STARTING { background: #1565c0; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; } .error { color: #c62828; white-space: pre-wrap; }
td.details { font-family: monospace; font-size: 0.82em; word-break: break-word; } .muted { color: #777; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _when(seconds: float | None) -> str:
    if not seconds:
        return ""
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return "" if value is None else str(value)


def _table(rows: list[tuple[str, Any]], head: tuple[str, ...] | None = None) -> str:
    out = ["<table>"]
    if head:
        out.append("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{_e(_value(cell))}</td>" for cell in row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _data(data: dict[str, Any] | None) -> str:
    if not data:
        return ""
    where = data.get("path") or data.get("table") or data.get("function")
    return f"{data.get('format')}: {where}"


def summary_rows(record: RunRecord) -> list[tuple[str, Any]]:
    """The summary table: state, applications, spec, progress, durations."""
    spec, status, progress = record.spec, record.status, record.progress or {}
    apps = list(dict.fromkeys(e.get("application_id") for e in record.of("application") if e.get("application_id")))
    if status.get("application_id") and status["application_id"] not in apps:
        apps.append(status["application_id"])
    nodes = f"{spec.get('num_nodes', '?')} TF node(s)"
    if spec.get("num_ps"):
        nodes += f", {spec['num_ps']} parameter server(s)"
    if spec.get("eval_node"):
        nodes += ", an evaluator"
    feed = spec.get("feed") or {}
    feed_text = (
        f"features {', '.join(feed.get('features') or [])}; label {feed.get('label')}; "
        f"batch size {feed.get('batch_size')} per node"
        if feed
        else ""
    )
    final_step = (record.export or {}).get("step", progress.get("step", status.get("step")))
    total = progress.get("total_steps")
    warm = record.of("warm_start", "warm_start_missing")
    warm_text = spec.get("warm_start") or ""
    if warm:
        last = warm[-1]
        warm_text += (
            f" (started from {last.get('path')}, exported at step {last.get('source_step')})"
            if last["kind"] == "warm_start"
            else " (no model there: trained from scratch)"
        )
    starts, ends = record.of("application"), record.of("application_end")
    attempts = record.of("attempt")
    rows: list[tuple[str, Any]] = [
        ("state", status.get("state", "unknown")),
        ("application(s)", ", ".join(apps)),
        ("spec hash", spec.get("spec_hash", status.get("spec_hash"))),
        ("train function", spec.get("train_fn")),
        ("args", spec.get("args")),
        ("nodes", nodes),
        ("input mode", spec.get("input_mode", "SPARK")),
        ("data", _data(spec.get("data"))),
        ("validation data", _data(spec.get("validation_data"))),
        ("feed", feed_text),
        ("warm start", warm_text),
        ("final step", f"{final_step}" + (f" of {total}" if total else "")),
        ("epochs", f"{progress.get('epoch')} of {progress.get('epochs')}" if progress.get("epochs") else ""),
        ("loss (latest)", progress.get("loss")),
        ("speed (latest)", _speed(progress)),
        ("TF cluster attempts", f"{len(attempts)} ({len(record.of('attempt_failed'))} failed)" if attempts else ""),
        ("checkpoints written", len(record.of("checkpoint"))),
        ("started", _when(starts[0]["time"] if starts else (record.events[0]["time"] if record.events else None))),
        ("ended", _when(ends[-1]["time"]) if ends else ""),
        ("application time", _duration(sum(e.get("seconds") or 0 for e in ends)) if ends else ""),
        ("training time (TF clusters)", _duration(_training_seconds(record))),
        ("error", status.get("error")),
    ]
    return [(name, value) for name, value in rows if value not in (None, "")]


def _speed(progress: dict[str, Any]) -> str:
    parts = []
    if progress.get("steps_per_sec"):
        parts.append(f"{progress['steps_per_sec']:.1f} steps/s")
    if progress.get("examples_per_sec"):
        parts.append(f"{progress['examples_per_sec']:,.0f} examples/s")
    return ", ".join(parts)


def _training_seconds(record: RunRecord) -> float | None:
    attempts = record.of("attempt")
    if not attempts:
        return None
    last = max(e["time"] for e in record.events if e.get("kind") not in ("application_end",))
    return last - attempts[0]["time"]


def _event_rows(record: RunRecord) -> list[tuple[str, str, str, str]]:
    t0 = record.events[0]["time"] if record.events else 0
    rows = []
    for event in record.events:
        if event.get("kind") in BULK_KINDS:
            continue
        details = ", ".join(f"{k}={_value(v)}" for k, v in sorted(event.items()) if k not in ("kind", "time", "run_id"))
        rows.append((_when(event.get("time")), f"+{event.get('time', t0) - t0:.1f} s", event.get("kind"), details))
    return rows


def render_html(record: RunRecord, plots: list[Plot], problems: list[str] | None = None) -> str:
    """The report page; it refers to ``plots`` by their file names (beside it)."""
    state = str(record.status.get("state", "unknown"))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Training report: {_e(record.uri)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Training report</h1>",
        f'<p class="uri">{_e(record.uri)}</p>',
        f'<p><span class="state {_e(state)}">{_e(state)}</span></p>',
        "<h2>Summary</h2>",
        _table(summary_rows(record)),
        "<h2>Export</h2>",
    ]
    if record.export:
        metrics = record.export.get("metrics") or {}
        parts.append(
            f"<p>Model exported at step {_e(record.export.get('step'))} on {_e(_when(record.export.get('time')))} "
            f"to <code>{_e(record.uri)}/export</code> (spec hash {_e(record.export.get('spec_hash'))}).</p>"
        )
        parts.append(_table(sorted(metrics.items()), ("metric", "value")) if metrics else "<p>No metrics.</p>")
    else:
        parts.append('<p class="muted">No model was exported.</p>')
    parts.append("<h2>Plots</h2>")
    if not plots:
        parts.append('<p class="muted">No training was recorded yet.</p>')
    for plot in plots:
        parts.append(
            f'<figure><img src="{_e(plot.name)}" alt="{_e(plot.title)}">'
            f"<figcaption><b>{_e(plot.title)}.</b> {_e(plot.caption)}</figcaption></figure>"
        )
    if not record.of("feed"):
        parts.append('<p class="muted">No data was fed from Spark (InputMode.TENSORFLOW, or none recorded).</p>')
    for problem in problems or []:
        parts.append(f'<p class="error">Could not draw {_e(problem)}</p>')
    parts.append("<h2>Checkpoints</h2>")
    if record.checkpoints:
        rows = [(c.get("name"), c.get("step"), c.get("epoch"), _when(c.get("time"))) for c in record.checkpoints]
        parts.append(_table(rows, ("checkpoint", "step", "epoch", "published")))
    else:
        parts.append('<p class="muted">No checkpoint is kept.</p>')
    parts.append("<h2>Events</h2>")
    counts = {kind: len(record.of(kind)) for kind in sorted(BULK_KINDS) if record.of(kind)}
    if counts:
        parts.append(
            '<p class="muted">Not listed: '
            + _e(", ".join(f"{n} {kind}" for kind, n in counts.items()))
            + " events (drawn in the plots).</p>"
        )
    rows = _event_rows(record)
    if rows:
        table = ["<table><tr><th>time</th><th>since start</th><th>event</th><th>details</th></tr>"]
        for when, since, kind, details in rows:
            table.append(
                f"<tr><td>{_e(when)}</td><td>{_e(since)}</td><td>{_e(kind)}</td>"
                f'<td class="details">{_e(details[:600])}</td></tr>'
            )
        parts.append("\n".join([*table, "</table>"]))
    parts.append(f'<p class="muted">Generated {_e(_when(_now()))} by airflow-tfos.</p></body></html>')
    return "\n".join(parts) + "\n"


def _now() -> float:
    return datetime.datetime.now(tz=datetime.UTC).timestamp()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_tfos.report", description="(Re)build a run directory's training report."
    )
    parser.add_argument("--run-dir", required=True, help="the run directory (path or URI)")
    parser.add_argument(
        "--webhdfs-config",
        metavar="JSON",
        help="HDFS settings (a WebHDFSConfig JSON) for hdfs:// paths; default: $AIRFLOW_TFOS_WEBHDFS",
    )
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if options.webhdfs_config:
            from airflow_tfos.webhdfs import ENV_VAR, WebHDFSConfig

            os.environ[ENV_VAR] = WebHDFSConfig.from_json(options.webhdfs_config).to_json()
        path = write_report(options.run_dir)
    except (ReportError, RunDirError, ValueError, OSError) as exc:
        sys.stderr.write(f"airflow-tfos report: {exc}\n")
        return 1
    sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
