"""The training report's HTML page: self-contained (no scripts, no external style sheets), every text escaped."""

from __future__ import annotations

import datetime
import html
import json
from typing import Any

from airflow_tfos.runtime.report.collect import BULK_KINDS, RunRecord
from airflow_tfos.runtime.report.plots import Plot

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


def _fingerprint(found: dict[str, Any] | None) -> str | None:
    """The fingerprint's hash, and each input's files and bytes (or why it is not fingerprinted)."""
    if not found:
        return None
    parts = []
    for name, item in (found.get("inputs") or {}).items():
        if item.get("hash"):
            parts.append(f"{name}: {item.get('count')} files, {item.get('bytes')} bytes")
        else:
            parts.append(f"{name}: not fingerprinted ({item.get('error') or item.get('note')})")
    code = (found.get("code") or {}).get("hash")
    parts += [f"code {code}"] if code else []
    return f"{found.get('hash')} ({'; '.join(parts)})" if parts else str(found.get("hash"))


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
        ("input fingerprint", _fingerprint(record.fingerprint)),
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
    elif all(e.get("source") == "parquet" for e in record.of("feed")):
        parts.append(
            '<p class="muted">The nodes read their shares of the Parquet files themselves, every epoch while they '
            "trained: nothing was read through Spark beforehand.</p>"
        )
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
