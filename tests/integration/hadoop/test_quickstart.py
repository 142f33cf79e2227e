"""The quickstart (docs/quickstart-yarn.md) as a newcomer follows it, on Hadoop's own YARN and HDFS (the lab): its
DAG folder is ``docs/quickstart/`` itself, so the DAG and ``my_training.py`` run exactly as the page shows them; the
set-up is the page's: ``HADOOP_CONF_DIR`` (and Spark's ``SPARK_CONF_DIR``) from the cluster, one ``spark_default``
connection whose host is ``yarn``, ``[tfos] run_dir_base`` on HDFS, the packed environment uploaded where the DAG
names it, and the day's Parquet data where the DAG reads it.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import time
from urllib.parse import urlsplit

import numpy as np
import pytest

from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.storage import storage_for
from tests.conftest import REPO
from tests.integration.hadoop.airflow_lab import AirflowOnLab, ended_well, tail

pytestmark = [pytest.mark.real_hadoop, pytest.mark.timeout(900)]

QUICKSTART = REPO / "docs" / "quickstart"
DAY, VERSION = "2026-11-21", "20261121T000000"


def write_day(hadoop_lab, folder: str, rows: int, seed: int) -> np.ndarray:
    """Parquet rows of the page's shape (``features``: 3 floats, ``label``: a float) in 2 files; return the labels."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(rows, 3)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5], dtype="float32") + 0.3).astype("float32")
    storage = storage_for(hadoop_lab.uri(folder))
    for part, half in enumerate(np.array_split(np.arange(rows), 2)):
        table = pa.table({"features": pa.array(x[half].tolist(), type=pa.list_(pa.float32())), "label": y[half]})
        out = io.BytesIO()
        pq.write_table(table, out)
        storage.write_bytes(hadoop_lab.uri(f"{folder}/part-{part}.parquet"), out.getvalue())
    return y


def test_the_quickstart_dag_trains_on_yarn_and_puts_its_model_in_service(spark_on_lab, hadoop_lab, lab_airflow):
    write_day(hadoop_lab, f"/data/my_model/day={DAY}/train", rows=1200, seed=1)
    holdout = write_day(hadoop_lab, f"/data/my_model/day={DAY}/holdout", rows=300, seed=2)
    # the packed environment, uploaded where the DAG names it (the page: venv-pack, then hdfs dfs -put): the lab's
    # (the same packages, linked), compressed as venv-pack writes it, since YARN unpacks an archive by its name
    built = hadoop_lab.uri(urlsplit(spark_on_lab.settings["spark.yarn.dist.archives"].split("#", 1)[0]).path)
    storage = storage_for(built)
    packed = gzip.compress(storage.read_bytes(built), compresslevel=1)
    storage.write_bytes(hadoop_lab.uri("/envs/tfos-runtime.tar.gz"), packed)
    # the Airflow of the other DAG tests here (its database, HADOOP_CONF_DIR and a SPARK_CONF_DIR with no default
    # Python environment), reading the quickstart's folder with the page's settings
    lab = AirflowOnLab(
        {
            **lab_airflow.env,
            "AIRFLOW__CORE__DAGS_FOLDER": str(QUICKSTART),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "yarn"}),
            "AIRFLOW__TFOS__RUN_DIR_BASE": "hdfs:///user/airflow/tfos-runs",
        },
        lab_airflow.rm_web,
    )
    # (the folder parses with no import error: tests/unit/airflow_tfos/operators/test_checks.py)

    started = time.monotonic()
    night = lab.airflow("dags", "test", "my_model_nightly", DAY, timeout=800)
    took = time.monotonic() - started
    assert ended_well(night), tail(night)
    text = night.stdout + night.stderr
    assert f"warm start: no model in service in hdfs:///models/my_model before version {VERSION}" in text
    registry = ModelRegistry(hadoop_lab.uri("/models/my_model"), storage=storage_for(hadoop_lab.uri("/models")))
    current = registry.current()
    assert current["version"] == VERSION, current
    (decision,) = registry.decisions()
    assert decision["published"], decision
    # the held-out loss the gate read is the model's: better than always predicting the mean label
    val_loss = current["metrics"]["val_loss"]
    assert math.isfinite(val_loss) and val_loss < 0.5 * float(np.var(holdout)), (val_loss, float(np.var(holdout)))
    # on the lab's summary line (the fixture prints it at the end): the night's time and what the gate read
    hadoop_lab.timings.update(
        quickstart_night_s=round(took, 1),
        quickstart_val_loss=round(val_loss, 4),
        holdout_var=round(float(np.var(holdout)), 4),
    )
    model = urlsplit(registry.current_model_path()).path  # hdfs:///models/my_model/versions/...: read by path here
    assert storage.exists(hadoop_lab.uri(f"{model}/saved_model.pb")), model
    # nothing of the run is left on the cluster
    mine = [a for a in lab.apps() if "my_model_nightly" in a.get("name", "")]
    assert len(mine) == 1 and mine[0]["state"] == "FINISHED" and mine[0]["finalStatus"] == "SUCCEEDED", mine
