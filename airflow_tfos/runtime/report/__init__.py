"""The training report: ``<run_dir>/report/report.html``, with the PNG plots it shows beside it.

Built from what the run directory holds (spec.json, status.json, events, the checkpoint manifest,
export/_SUCCESS, progress.json) by :func:`write_report`, which the driver calls at the end of every
training application, and by hand::

    python -m airflow_tfos.runtime.report --run-dir hdfs:///runs/digits/2026-11-22

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

import os
import tempfile

from airflow_tfos.runtime.errors import ReportError
from airflow_tfos.runtime.report.collect import RunRecord, collect
from airflow_tfos.runtime.report.page import render_html
from airflow_tfos.runtime.report.plots import Plot, render_plots
from airflow_tfos.shared.rundir import REPORT_DIR, REPORT_HTML, RunDir

__all__ = ["Plot", "ReportError", "RunRecord", "collect", "render_html", "render_plots", "write_report"]


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
