"""The Spark driver's entrypoint: ``python -m airflow_tfos.runtime.driver --run-dir URI``.

What spark-submit runs (on YARN in cluster mode, or locally). It reads ``spec.json`` from the run
directory, builds the input, runs the TF cluster (with automatic recovery), then serves the feed
requests found in ``feeds/``, in order, each once. It keeps ``status.json`` current (state, application
id, attempt, latest checkpoint step, heartbeat, and the chief's ``progress.json`` as ``progress``),
honours a stop request (waits for the next checkpoint, at most ``stop_grace_secs``, then stops the
cluster), records the events ``application`` (``application_id``, ``spec_hash``, ``spark_version``) and
``application_end`` (``application_id``, ``state``, ``exit_code``, ``seconds``), writes the training
report (``report/report.html``, :mod:`airflow_tfos.runtime.report`; best effort) and exits non-zero on failure:

- 0: trained (or already exported for this spec, or stopped on request);
- 1: training failed (the error is in status.json and on stderr; checkpoints are kept);
- 2: the spec, the training function or the input cannot be used, or spec.json is not the spec that was
  submitted (``--spec-hash``, given by the hook, differs from its content's hash, or so does its stored
  ``spec_hash``): then nothing named in it is imported.

A feed request whose own input cannot be used (its data, columns, fields) fails alone: it is marked
done with ``error`` and ``exit_code`` 2, and the driver goes on serving. A feed request is read from the
run directory, which no hash vouches for: it may name only the data functions the verified spec allows
(its ``feed_functions``, ``data`` and ``validation_data``), Spark's own reader options and plain table
names (:func:`~airflow_tfos.shared.spec.check_feed_data`). Any other is refused before anything it names
is imported or read: marked done with ``refused``, ``error`` and ``exit_code`` 2, and recorded as the
event ``feed_refused`` (``feed_id``, ``error``). Whatever ends the driver, status.json is left with the
final state and, on failure, the error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from airflow_tfos.runtime.driver.heartbeat import DriverWatch
from airflow_tfos.runtime.driver.launcher import TFClusterRun
from airflow_tfos.runtime.driver.table_fingerprint import already_trained, has_table_inputs, resolve_tables
from airflow_tfos.runtime.errors import ClusterConfigError, RunCancelledError, TFoSRuntimeError
from airflow_tfos.shared import events
from airflow_tfos.shared.errors import FeedConfigError, FeedRefusedError, RunDirError, WebHDFSConfigError
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import (
    RunSpec,
    SpecError,
    allowed_feed_functions,
    check_feed_data,
    import_callable,
    parse_spec,
    verified_spec_hash,
)
from airflow_tfos.shared.storage.hadoop_tokens import use_container_token
from airflow_tfos.shared.storage.kerberos import take_submitted_token
from airflow_tfos.shared.storage.tokens import TokenKeeper
from airflow_tfos.shared.storage.webhdfs_config import add_config_option, use_config

log = logging.getLogger("airflow_tfos.driver")

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
#: How often a serving driver looks for new feed requests.
SERVE_POLL_SECS = 2.0


def build_input(spark, data: dict[str, Any], what: str = "data"):
    """Return the DataFrame a spec's ``data`` (or ``validation_data``) names."""
    fmt, options = data["format"], dict(data.get("options") or {})
    try:
        if fmt == "table":
            return spark.table(data["table"])
        if fmt == "parquet":
            return spark.read.options(**options).parquet(data["path"])
        if fmt == "csv":
            return spark.read.options(**{"header": True, "inferSchema": True, **options}).csv(data["path"])
        if fmt == "function":
            frame = import_callable(data["function"], f"{what}.function")(spark, **options)
            if not hasattr(frame, "mapInArrow"):
                raise SpecError(f"{what}.function {data['function']!r} must return a DataFrame")
            return frame
    except SpecError:
        raise
    except Exception as exc:
        where = data.get("path") or data.get("table") or data.get("function")
        raise SpecError(f"cannot read {what} {where!r}: {str(exc).splitlines()[0]}") from exc
    raise SpecError(f"{what} with format {fmt!r} is read by the TF nodes themselves: use input_mode TENSORFLOW")


def _fail(rundir: RunDir | None, message: str, code: int, **fields: Any) -> int:
    log.error("%s", message)
    sys.stderr.write(f"airflow-tfos driver: {message}\n")
    if rundir is not None:
        fields = {key: value for key, value in fields.items() if value is not None}  # unknown: keep the last
        try:
            rundir.write_status("FAILED", error=message, exit_code=code, **fields)
            rundir.add_event(events.FAILED, error=message, exit_code=code)
        except Exception as exc:  # the storage may be what failed: say so, and still exit with the code
            sys.stderr.write(f"airflow-tfos driver: cannot record the failure either: {exc}\n")
            from airflow_tfos.shared.errors import DRIVER_EXIT_TOKEN_REFUSED, TOKEN_REFUSED

            if TOKEN_REFUSED in str(exc):  # the one thing the Airflow side then learns: the exit status
                return DRIVER_EXIT_TOKEN_REFUSED
    return code


def _run_once(spark, spec: RunSpec, rundir: RunDir, train_fn, args, data, watch: DriverWatch, digest: str):
    frame = build_input(spark, data, "data") if data and spec.input_mode == "SPARK" else None
    validation = build_input(spark, spec.validation_data, "validation_data") if spec.validation_data else None
    if data and spec.input_mode == "TENSORFLOW" and isinstance(args, dict | None):
        args = {**(args or {}), "data": data}
    tf_run = TFClusterRun.from_spec(
        spark.sparkContext,
        spec,
        train_fn,
        args,
        run_dir=rundir.uri,
        env={"AIRFLOW_TFOS_SPEC_HASH": digest},
        data=frame,
        validation_data=validation,
    )
    watch.attach(tf_run)
    return tf_run.start().wait()


#: Fields of a feed request (``feed_id`` and ``requested`` are written by :meth:`RunDir.request_feed`).
FEED_REQUEST_FIELDS = frozenset({"feed_id", "requested", "data", "args"})


def feed_request_input(spec: RunSpec, request: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
    """Check a feed request; return its ``(data, args)`` or raise :class:`SpecError` naming what is wrong
    (:class:`FeedRefusedError` when it asks for what ``spec`` does not allow). Nothing it names is imported."""
    feed_id = request.get("feed_id")
    if request.get("invalid"):
        raise SpecError(f"feed request {feed_id} cannot be read: {request['invalid']}")
    unknown = sorted(set(request) - FEED_REQUEST_FIELDS)
    if unknown:
        raise SpecError(f"feed request {feed_id} has unknown field(s): {', '.join(unknown)} (known: data, args)")
    data = request.get("data")
    if data is not None:
        if not isinstance(data, dict):
            raise SpecError(f"feed request {feed_id}: data must be a JSON object, not {type(data).__name__}")
        check_feed_data(data, allowed_feed_functions(spec), "feed data")
        if spec.input_mode == "SPARK" and not spec.feed:
            raise SpecError(
                f"feed request {feed_id} has data, but spec.json has no 'feed' (features, label, batch_size)"
            )
    args = request.get("args", spec.args)
    if not isinstance(args, dict | list | None):
        raise SpecError(f"feed request {feed_id}: args must be a JSON object or list, not {type(args).__name__}")
    return data, args


def _serve_feed(
    spark, spec: RunSpec, rundir: RunDir, train_fn, watch: DriverWatch, digest: str, request: dict[str, Any]
):
    """Run one feed request and mark it done. A feed whose own input is unusable is marked done with the
    error (exit code 2) and None is returned, as is a feed refused (recorded as the event ``feed_refused`` too);
    a failure of the TF cluster is marked too, then raised."""
    feed_id = request["feed_id"]
    log.info("serving feed %s", feed_id)
    try:
        data, args = feed_request_input(spec, request)
        result = _run_once(spark, spec, rundir, train_fn, args, data, watch, digest)
    except FeedRefusedError as exc:  # nothing it names was imported or read; the next request is served
        log.error("feed %s refused: %s", feed_id, exc)
        _record(rundir, events.FEED_REFUSED, feed_id=feed_id, error=str(exc))
        rundir.mark_feed_done(
            feed_id, step=_step_or_none(watch), error=str(exc), exit_code=EXIT_BAD_INPUT, refused=True, spec_hash=digest
        )
        return None
    except (SpecError, FeedConfigError) as exc:
        log.error("feed %s failed on its input; the cluster serves on: %s", feed_id, exc)
        rundir.mark_feed_done(
            feed_id, step=_step_or_none(watch), error=str(exc), exit_code=EXIT_BAD_INPUT, spec_hash=digest
        )
        return None
    except RunCancelledError:
        raise  # a stop request, or the cluster cancelled: the feed was not done
    except Exception as exc:  # the cluster failed: the feed says why, then the driver ends
        try:
            rundir.mark_feed_done(
                feed_id, step=_step_or_none(watch), error=str(exc), exit_code=EXIT_FAILED, spec_hash=digest
            )
        except Exception as record_error:
            log.warning("cannot mark feed %s as failed: %s", feed_id, record_error)
        raise
    rundir.mark_feed_done(feed_id, step=watch.step(), result=_jsonable(result), spec_hash=digest)
    return result


def _serve(spark, spec: RunSpec, rundir: RunDir, train_fn, watch: DriverWatch, digest: str, result: Any) -> Any:
    """Serving mode: run each feed request as it arrives, until a stop request.

    A feed that fails on its own input fails alone; the run directory failing to answer is waited out.
    With ``serve_idle_secs``, a driver that has had no feed request for that long stops by itself (its
    launch task failed or is gone, and no shutdown came): nothing holds the cluster's executors for good.
    """
    watch.base["serving"] = True
    watch.beat()
    log.info("serving feed requests from %s until a stop request", rundir.path("feeds"))
    outage: float | None = None
    idle_limit, busy_at = spec.serve_idle_secs, time.monotonic()
    while not watch.stopping.is_set():
        try:
            pending = rundir.pending_feeds()
        except (RunDirError, OSError) as exc:
            if outage is None:
                outage = time.monotonic()
                log.warning("cannot look for feed requests in %s (%s); trying again", rundir.uri, exc)
            pending = []
        else:
            if outage is not None:
                log.info("feed requests can be read again after %.0f s", time.monotonic() - outage)
                outage = None
        for request in pending:
            if watch.stopping.is_set():
                break
            served = _serve_feed(spark, spec, rundir, train_fn, watch, digest, request)
            result = served if served is not None else result
            busy_at = time.monotonic()
        if not pending:
            idle = time.monotonic() - busy_at
            if idle_limit is not None and idle >= idle_limit:
                log.warning(
                    "no feed request for %.0f s (serve_idle_secs=%s, the launch task's idle_timeout): stopping",
                    idle,
                    idle_limit,
                )
                _record(rundir, events.IDLE_STOP, idle_secs=round(idle, 1), serve_idle_secs=idle_limit)
                watch.idle = True
                watch.stopping.set()
                break
            watch.stopping.wait(SERVE_POLL_SECS if idle_limit is None else min(SERVE_POLL_SECS, idle_limit))
            try:
                if watch.stop_request():
                    watch.stopping.set()
            except (RunDirError, OSError):
                pass  # already said above; the heartbeat thread also looks for stop requests
    log.info("%s: no more feeds are served", "idle" if watch.idle else "stop requested")
    return result


def run_inference_job(spark, spec: RunSpec) -> dict[str, Any]:
    """Score ``spec.data`` with the SavedModel in ``spec.inference`` and write the predictions as Parquet."""
    from airflow_tfos.runtime.driver.inference import predict, write_predictions

    job = spec.inference or {}
    frame = build_input(spark, spec.data, "data")
    # A model on a Kerberized HDFS: the executors fetch it with a delegation token, alive until the rows are written.
    tokens = TokenKeeper.for_run_dir(job["model_path"], "batch inference")
    try:
        scored = predict(
            frame,
            job["model_path"],
            job["features"],
            output_col=job.get("output_col", "prediction"),
            output=job.get("output"),
            outputs=job.get("outputs"),
            signature=job.get("signature", "serving_default"),
            batch_size=int(job.get("batch_size", 1024)),
            webhdfs_token=tokens.token if tokens is not None else None,
        )
        rows = write_predictions(scored, job["output_path"])  # the previous predictions stay until these are whole
    finally:
        if tokens is not None:
            tokens.stop()
    log.info("wrote %d predictions to %s", rows, job["output_path"])
    return {"rows": rows, "output_path": job["output_path"]}


def run_driver(
    run_dir: str,
    *,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    heartbeat_secs: float = 10.0,
    expected_spec_hash: str | None = None,
) -> int:
    """Run the spec in ``run_dir``; return the exit code (see the module's docstring).

    ``expected_spec_hash`` (``--spec-hash``, given by the submitting hook) must be the hash of spec.json's
    content, else nothing of the spec is imported or run (exit 2). Without it the hash is recomputed and
    checked against the one spec.json holds only.
    """
    try:
        rundir = RunDir(run_dir)
        raw = rundir.read_spec()
    except (RunDirError, ValueError) as exc:
        return _fail(None, f"{exc}; run directory {run_dir}", EXIT_BAD_INPUT)
    if raw is None:
        return _fail(rundir, f"no spec.json in {run_dir}: write the spec first", EXIT_BAD_INPUT)
    try:
        spec = parse_spec(raw)
        digest = verified_spec_hash(raw, expected_spec_hash)
        if expected_spec_hash is None:
            log.warning("spec.json (spec %s) was not verified: no --spec-hash was given", digest)
        done = rundir.export_success()
        tables = spec.kind == "train" and has_table_inputs(rundir)  # their content is checked once Spark runs
        if done and done.get("spec_hash") == digest and not tables:
            log.info("already exported for spec %s at step %s: nothing to do", digest, done.get("step"))
            return EXIT_OK
        train_fn = import_callable(spec.train_fn, "train_fn") if spec.kind == "train" else None
    except (SpecError, RunDirError) as exc:
        return _fail(rundir, str(exc), EXIT_BAD_INPUT)

    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # run by hand; spark-submit has named it (--name)
        builder = builder.appName(f"airflow-tfos {digest}")
    if master:
        builder = builder.master(master)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    started = time.monotonic()
    app_id = spark.sparkContext.applicationId
    _record(rundir, events.APPLICATION, application_id=app_id, spec_hash=digest, spark_version=spark.version)
    if spec.kind == "train" and spec.tensorboard:
        try:  # a TensorBoard address left by an application that died is no link of this one
            rundir.clear_tensorboard()
        except RunDirError as exc:
            log.warning("%s", exc)
    code = EXIT_FAILED
    try:
        if tables:
            try:
                done = already_trained(rundir, digest, resolve_tables(spark, rundir))
            except Exception as exc:  # the table is missing or unreadable: the spec names what to change
                code = _fail(rundir, f"cannot fingerprint the table input: {str(exc).splitlines()[0]}", EXIT_BAD_INPUT)
                return code
            if done:
                log.info(
                    "already exported for spec %s and this table content at step %s: nothing to do",
                    digest,
                    done.get("step"),
                )
                code = EXIT_OK
                return code
        code = _run_application(spark, spec, rundir, train_fn, digest, heartbeat_secs)
        return code
    finally:
        spark.stop()
        state = _read_state(rundir)
        _record(
            rundir,
            events.APPLICATION_END,
            application_id=app_id,
            state=state,
            exit_code=code,
            seconds=round(time.monotonic() - started, 1),
        )
        if spec.kind == "train":
            fold_events_safely(rundir)
            write_report_safely(rundir)


def _run_application(spark, spec: RunSpec, rundir: RunDir, train_fn, digest: str, heartbeat_secs: float) -> int:
    base = {"application_id": spark.sparkContext.applicationId, "spec_hash": digest}
    watch = DriverWatch(rundir, spec, base, heartbeat_secs)
    try:
        rundir.write_status("STARTING", **base, step=watch.step(), error=None, progress=None)
        watch.start()
        if spec.kind == "inference":
            result = run_inference_job(spark, spec)
            watch.finish("SUCCEEDED", result=result)
            return EXIT_OK
        result = None
        if spec.data is not None or not spec.serve:
            result = _run_once(spark, spec, rundir, train_fn, spec.args, spec.data, watch, digest)
        if spec.serve:
            result = _serve(spark, spec, rundir, train_fn, watch, digest, result)
            if watch.idle:
                watch.finish("STOPPED", result=_jsonable(result), reason="idle")
            else:
                watch.finish("SUCCEEDED", result=_jsonable(result))
            return EXIT_OK
        for request in rundir.pending_feeds():
            if watch.stopping.is_set():
                break
            result = _serve_feed(spark, spec, rundir, train_fn, watch, digest, request)
        watch.finish("STOPPED" if watch.stopping.is_set() else "SUCCEEDED", result=_jsonable(result))
        return EXIT_OK
    except RunCancelledError:
        if watch.stopping.is_set():
            watch.finish("STOPPED")
            rundir.add_event(events.STOPPED, step=watch.step())
            return EXIT_OK
        with watch.lock:
            watch.finished.set()
        return _fail(rundir, "the TF cluster was cancelled", EXIT_FAILED, **base)
    except (SpecError, FeedConfigError, ClusterConfigError) as exc:
        with watch.lock:
            watch.finished.set()
        return _fail(rundir, str(exc), EXIT_BAD_INPUT, **base)
    except TFoSRuntimeError as exc:
        with watch.lock:
            watch.finished.set()
        return _fail(rundir, str(exc), EXIT_FAILED, **base, step=_step_or_none(watch))
    except Exception as exc:  # whatever else ended the run, status.json says it
        log.exception("the driver failed")
        with watch.lock:
            watch.finished.set()
        return _fail(rundir, f"{type(exc).__name__}: {exc}", EXIT_FAILED, **base)
    finally:
        watch.finished.set()


def _step_or_none(watch: DriverWatch) -> int | None:
    try:
        return watch.step()
    except (RunDirError, OSError):
        return None


def _record(rundir: RunDir, kind: str, **fields: Any) -> None:
    try:
        rundir.add_event(kind, **fields)
    except RunDirError as exc:
        log.warning("cannot record %s in %s: %s", kind, rundir.uri, exc)


def _read_state(rundir: RunDir) -> str | None:
    try:
        return (rundir.read_status() or {}).get("state")
    except RunDirError:
        return None


def fold_events_safely(rundir: RunDir) -> None:
    """Fold what is left of the run's event files into a batch file (the report reads a few files)."""
    try:
        rundir.compact_events()
    except Exception as exc:  # the events stay where they are, readable as they are
        log.warning("cannot fold the event files of %s: %s", rundir.uri, exc)


def write_report_safely(rundir: RunDir) -> str | None:
    """Write the training report; on any failure log a warning and return None (never fails the run)."""
    started = time.monotonic()
    try:
        from airflow_tfos.runtime.report import write_report

        path = write_report(rundir)
    except Exception as exc:  # the report is a convenience: it must never change the run's outcome
        log.warning("cannot write the training report to %s: %s", rundir.uri, exc, exc_info=True)
        return None
    log.info("training report written to %s in %.1f s", path, time.monotonic() - started)
    return path


def _jsonable(value: Any) -> Any:
    import json

    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def main(argv: list[str] | None = None) -> int:
    # First: the submitting hook's WebHDFS delegation token leaves the environment before Spark's JVM, the TF
    # nodes or anything else could copy it; it is this process's, in memory (TokenKeeper lends it to the nodes).
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from_hook = take_submitted_token()
    if not from_hook:  # on a secure YARN: the application's own token (it logs which)
        use_container_token()
    parser = argparse.ArgumentParser(prog="python -m airflow_tfos.runtime.driver", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="the run directory (path or URI) holding spec.json")
    parser.add_argument("--master", help="Spark master, when not started by spark-submit")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting")
    parser.add_argument("--heartbeat-secs", type=float, default=10.0, help="how often status.json is updated")
    parser.add_argument(
        "--spec-hash",
        metavar="HASH",
        help="the hash of the spec that was submitted: a spec.json whose content hashes otherwise is refused "
        "(exit 2) before anything named in it is imported; without it, spec.json is not verified",
    )
    add_config_option(parser)
    options = parser.parse_args(argv)
    if from_hook:
        log.info("WebHDFS is reached with the delegation token of the hook that submitted this driver")
    if options.webhdfs_config:
        try:  # the TF nodes get it from the environment too (TFClusterRun passes AIRFLOW_TFOS_* on)
            use_config(options.webhdfs_config)
        except WebHDFSConfigError as exc:
            return _fail(None, f"--webhdfs-config: {exc}", EXIT_BAD_INPUT)
    conf = dict(item.split("=", 1) for item in options.conf)
    return run_driver(
        options.run_dir,
        master=options.master,
        conf=conf,
        heartbeat_secs=options.heartbeat_secs,
        expected_spec_hash=options.spec_hash,
    )


if __name__ == "__main__":
    sys.exit(main())
