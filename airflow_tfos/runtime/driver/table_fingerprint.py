"""Fingerprints of catalog tables, taken by the Spark driver when a run starts.

Only the driver knows the catalog, so the operator records a ``table`` input as pending
(:func:`airflow_tfos.shared.fingerprint.pending_table`) and the driver fingerprints it here: the files of the
table's current version (``DataFrame.inputFiles()``), each one's size and modification time, read with one
``listStatus`` per folder through Hadoop's FileSystem (so any file system the cluster reads: HDFS, S3A, local).
Delta and Iceberg tables are covered by the same listing: a new table version reads another set of files.

Then the driver decides what the operator decides for file inputs (:class:`~airflow_tfos.operators.run.TrainingRun`):

- an export of this spec learned from this table content: nothing to do;
- an export or checkpoints of other table content: moved to ``previous/<time>/``, the run trains from scratch,
  and the log says what changed;
- else (a first run, or checkpoints of this content): train, resuming from the checkpoints.

fingerprint.json is rewritten with the table's listing, so the export's ``_SUCCESS``, the report, the registry
and lineage carry it.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from airflow_tfos.shared.fingerprint import changes, listing_fingerprint, pending_tables, with_inputs
from airflow_tfos.shared.rundir import RunDir

log = logging.getLogger("airflow_tfos.driver")


def _provider(spark, table: str) -> str | None:
    """The table's provider (``parquet``, ``hive``, ``delta``, ``iceberg``...) as the catalog describes it."""
    try:
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
    except Exception:  # a view, or a catalog without DESCRIBE EXTENDED: the listing is what counts
        return None
    for row in rows:
        if (row[0] or "").strip() == "Provider":
            return (row[1] or "").strip().lower() or None
    return None


def _common_folder(folders: list[str]) -> str:
    """The deepest folder holding every one of ``folders`` (URIs as Hadoop writes them: ``hdfs://nn/a``),
    compared by ``/``-separated parts (so the ``//`` after a scheme stays)."""
    split = [folder.split("/") for folder in folders]
    common = []
    for parts in zip(*split, strict=False):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return "/".join(common)


def table_listing(spark, table: str) -> tuple[str | None, dict[str, list[Any]]]:
    """The folder common to the files ``table`` reads now, and ``{path relative to it: [size, mtime ms]}``."""
    files = sorted(set(spark.table(table).inputFiles()))
    if not files:
        return None, {}
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    wanted, folders = set(), {}
    for name in files:  # as listStatus names them (``file:/x``, where inputFiles may say ``file:///x``)
        path = jvm.org.apache.hadoop.fs.Path(name)
        path = path.getFileSystem(conf).makeQualified(path)
        wanted.add(path.toString())
        folders[path.getParent().toString()] = path.getParent()
    found: dict[str, list[Any]] = {}
    for folder in folders.values():
        for status in folder.getFileSystem(conf).listStatus(folder):
            name = status.getPath().toString()
            if name in wanted:
                found[name] = [int(status.getLen()), int(status.getModificationTime())]
    missing = wanted - set(found)
    if missing:  # listed away between the plan and the listing: the table changed under the run
        raise FileNotFoundError(f"{len(missing)} files of table {table} are gone, e.g. {sorted(missing)[0]}")
    base = _common_folder(sorted(folders))
    return base, {name[len(base) + 1 :]: value for name, value in found.items()}


def table_fingerprint(spark, table: str) -> dict[str, Any]:
    """One table input's fingerprint: its provider, folder, and the listing of the files it reads now."""
    location, entries = table_listing(spark, table)
    fields: dict[str, Any] = {
        "kind": "table",
        "table": table,
        "resolver": "driver",
        "provider": _provider(spark, table),
    }
    if location is None:
        return {**fields, "hash": None, "note": "it reads no files (a view or a non-file source)"}
    return listing_fingerprint(entries, **fields, location=location)


def has_table_inputs(rundir: RunDir) -> bool:
    """Whether fingerprint.json names a table input (the operator wrote it with the spec)."""
    inputs = (rundir.read_fingerprint() or {}).get("inputs") or {}
    return any(found.get("kind") == "table" for found in inputs.values())


def resolve_tables(spark, rundir: RunDir) -> dict[str, Any] | None:
    """Fingerprint the run's table inputs (as fingerprint.json names them), move aside an export or checkpoints
    learned from other table content, and write the resolved fingerprint.json; return it (None when the run
    has no table input, or no fingerprint.json: run by hand)."""
    current = rundir.read_fingerprint()
    tables = {n: f["table"] for n, f in ((current or {}).get("inputs") or {}).items() if f.get("kind") == "table"}
    if not current or not tables:
        return None
    started = time.monotonic()
    resolved = with_inputs(current, {name: table_fingerprint(spark, table) for name, table in tables.items()})
    resolved["seconds"] = round(time.monotonic() - started, 4)
    log.info(
        "fingerprint %s of the table input (%s) in %.2f s",
        resolved["hash"],
        ", ".join(f"{tables[n]}: {resolved['inputs'][n].get('count', 0)} files" for n in sorted(tables)),
        resolved["seconds"],
    )
    export = rundir.export_success()
    if export and export.get("fingerprint"):
        known = export["fingerprint"]
    else:  # checkpoints are of the content the last driver resolved (fingerprint.json carries it)
        known = None if pending_tables(current) else current.get("hash")
    if known != resolved["hash"] and (export or rundir.latest_checkpoint()):
        since = (export or {}).get("time") or current.get("time") or time.time()
        label = datetime.fromtimestamp(since, tz=UTC).strftime("%Y%m%dT%H%M%SZ")
        kept = rundir.set_aside(label)
        log.warning(
            "the input changed since the %s of %s: %s. Training starts from scratch; the old export and "
            "checkpoints are kept in %s",
            "export" if export else "checkpoints",
            datetime.fromtimestamp(since, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "; ".join(changes(current, resolved)),
            kept,
        )
    rundir.write_fingerprint(resolved)
    return resolved


def already_trained(rundir: RunDir, digest: str, resolved: dict[str, Any] | None) -> dict[str, Any] | None:
    """The export's record when it is of spec ``digest`` and of the resolved table content, else None."""
    done = rundir.export_success()
    if resolved and done and done.get("spec_hash") == digest and done.get("fingerprint") == resolved["hash"]:
        return done
    return None
