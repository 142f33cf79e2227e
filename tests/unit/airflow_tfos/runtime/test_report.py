"""The training report on hand-made run directories (no TensorFlow) and on HDFS (the WebHDFS emulator). From a
real driver run on a local cluster: tests/integration/spark/test_progress_report.py."""

from __future__ import annotations

from pathlib import Path

from airflow_tfos.runtime import report
from airflow_tfos.runtime.program.progress import ProgressTracker
from airflow_tfos.runtime.report import cli as report_cli
from airflow_tfos.shared.fingerprint import run_fingerprint
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from tests.unit.airflow_tfos.runtime.program.test_progress import node_ctx

PNG = b"\x89PNG\r\n\x1a\n"
PLOTS = ("metrics.png", "step_times.png", "feed.png", "timeline.png", "memory.png")


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG), path
    assert len(data) > 5000, (path, len(data))


def failed_run(rundir: RunDir) -> None:
    """A run that failed on its first attempt: no feed, no export, one checkpoint."""
    rundir.write_spec({"train_fn": "pkg.mod:train", "num_nodes": 2, "input_mode": "TENSORFLOW",
                       "data": {"format": "parquet", "path": "hdfs:///data/<day>"}})  # fmt: skip
    rundir.write_status("FAILED", application_id="app-1", error="ValueError: <script>alert(1)</script>")
    rundir.add_event("application", application_id="app-1", spec_hash="abc")
    rundir.add_event("attempt", attempt=0, run_id="r1")
    for step in range(1, 9):
        rundir.add_event("step_metrics", step=step, epoch=1, attempt=0, loss=2.0 / step, accuracy=0.1 * step)
    rundir.add_event("metrics", step=5, epoch=1, attempt=0, loss=0.5, accuracy=0.5, val_loss=0.7, val_accuracy=0.4)
    rundir.add_event("worker_steps", worker="chief:0", attempt=0, epoch=1, step=5, steps=5, mean_secs=0.02,
                     p50_secs=0.02, p90_secs=0.03, max_secs=0.04)  # fmt: skip
    rundir.publish_checkpoint(rundir.checkpoint_staging(5), 5, epoch=1)
    rundir.add_event("checkpoint", step=5, epoch=1, seconds=0.1, path="x")
    rundir.add_event("node_memory", worker="chief:0", attempt=0, peak_rss_mb=812.5, ok=False)
    rundir.add_event("attempt_failed", attempt=0, run_id="r1", reason="lost <worker>", retrying=False)
    rundir.add_event("failed", error="ValueError: <script>alert(1)</script>")
    rundir.add_event("application_end", application_id="app-1", state="FAILED", exit_code=1, seconds=42.0)


def test_the_report_of_a_failed_run_without_feed_or_export(tmp_path):
    rundir = RunDir(str(tmp_path))
    failed_run(rundir)
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.parquet").write_bytes(b"p" * 321)
    rundir.write_fingerprint(run_fingerprint({"data": {"format": "parquet", "path": str(data)}}))
    path = report.write_report(rundir)
    assert path == f"{tmp_path}/report/report.html"
    page = (tmp_path / "report" / "report.html").read_text()
    assert f"{rundir.read_fingerprint()['hash']} (data: 1 files, 321 bytes)" in page
    names = sorted(p.name for p in (tmp_path / "report").glob("*.png"))
    assert names == ["memory.png", "metrics.png", "step_times.png", "timeline.png"]  # no feed plot
    for name in names:
        assert f'src="{name}"' in page
        assert_png(tmp_path / "report" / name)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "lost &lt;worker&gt;" in page and "hdfs:///data/&lt;day&gt;" in page
    assert "No model was exported" in page and "No data was fed from Spark" in page
    assert "ckpt-5" in page and "app-1" in page and "1 (1 failed)" in page
    assert "attempt_failed" in page and "Not listed: 1 metrics, 1 node_memory, 8 step_metrics" in page


def test_the_report_of_direct_reads_draws_no_feed_rates_and_says_why(tmp_path):
    """Nodes that read their Parquet files themselves record rows, not a rate: no feed plot of zeros."""
    rundir = RunDir(str(tmp_path))
    failed_run(rundir)
    for worker in ("chief:0", "worker:0"):
        rundir.add_event("feed", worker=worker, attempt=0, rows=500, splits={"train": 500}, source="parquet")
    report.write_report(rundir)
    page = (tmp_path / "report" / "report.html").read_text()
    assert not (tmp_path / "report" / "feed.png").exists() and 'src="feed.png"' not in page
    assert "The nodes read their shares of the Parquet files themselves" in page
    assert "No data was fed from Spark" not in page


def test_the_report_cli_and_an_empty_directory(tmp_path, capsys):
    assert report_cli.main(["--run-dir", str(tmp_path / "nothing")]) == 1
    assert "not a run directory" in capsys.readouterr().err
    rundir = RunDir(str(tmp_path / "run"))
    rundir.write_spec({"train_fn": "pkg.mod:train", "num_nodes": 1})
    assert report_cli.main(["--run-dir", rundir.uri]) == 0
    assert capsys.readouterr().out.strip() == f"{rundir.uri}/report/report.html"
    page = Path(rundir.uri, "report", "report.html").read_text()
    assert "No training was recorded yet" in page and not list(Path(rundir.uri, "report").glob("*.png"))


def test_progress_and_the_report_on_hdfs(tmp_path):
    with WebHDFSEmulator() as emu:
        uri = emu.uri("/runs/r")
        rundir = RunDir(uri)
        failed_run(rundir)
        tracker = ProgressTracker(node_ctx(uri), steps_per_epoch=2, epochs=1, interval=0.01)
        tracker.step({"loss": 1.0})
        tracker.step({"loss": 0.5})
        tracker.finish()
        assert rundir.read_progress()["step"] == 2
        assert report.write_report(rundir) == f"{uri}/report/report.html"
        html = Path(emu.local_path("/runs/r/report/report.html")).read_text()
        assert 'src="timeline.png"' in html
        assert_png(Path(emu.local_path("/runs/r/report/timeline.png")))
        creates = [r.path for r in emu.requests if r.op == "CREATE" and "/report/" in r.path]
        assert creates[-1].startswith("/runs/r/report/.report.html")  # the page is written after its images
