"""Batch inference with a SavedModel on HDFS (the WebHDFS emulator): fetched into a local cache by the driver and
the executors, once per version of the export."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile

import pytest

from airflow_tfos.runtime import predict
from airflow_tfos.runtime.program import saved_models
from airflow_tfos.shared.errors import WebHDFSConfigError
from airflow_tfos.shared.storage import storage_for
from airflow_tfos.shared.storage.webhdfs_client import clear_cached_storages
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV

DATA_FILE = "variables/variables.data-00000-of-00001"


def publish_linear_model(local_dir, uri: str, w: tuple[float, float], b: float) -> None:
    """Save a SavedModel computing ``x . w + b`` (``x``: 2 floats) into ``local_dir`` and put it at ``uri``."""
    import tensorflow as tf

    class Linear(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable([[w[0]], [w[1]]], dtype=tf.float32)
            self.b = tf.Variable(b, dtype=tf.float32)

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
        def serve(self, x):
            return {"y": tf.matmul(x, self.w)[:, 0] + self.b}

    module = Linear()
    shutil.rmtree(local_dir, ignore_errors=True)
    tf.saved_model.save(module, str(local_dir), signatures={"serving_default": module.serve})
    storage = storage_for(uri)
    storage.delete(uri)
    storage.put_dir(str(local_dir), uri)


def data_reads(emu) -> list:
    return [r for r in emu.requests if r.server == "datanode" and r.op == "OPEN" and r.path.endswith(DATA_FILE)]


def cached_copies(uri: str) -> list[str]:
    root = saved_models.cache_root()
    prefix = hashlib.sha256(uri.encode()).hexdigest()[:16]
    return sorted(n for n in os.listdir(root) if n.startswith(f"{prefix}-")) if os.path.isdir(root) else []


def test_a_changed_export_has_a_new_version_and_is_fetched_again(emu, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # a cache of this test's own
    os.mkdir(tmp_path / "tmp")
    uri = emu.uri("/models/linear")
    publish_linear_model(tmp_path / "a", uri, (3.0, -2.0), 1.0)
    first = saved_models.remote_version(uri)
    assert saved_models.remote_version(uri) == first
    local = saved_models.fetch(uri)
    assert os.path.exists(os.path.join(local, DATA_FILE)) and len(data_reads(emu)) == 1
    emu.requests.clear()
    assert saved_models.fetch(uri) == local and not data_reads(emu)  # once per process and version

    publish_linear_model(tmp_path / "b", uri, (0.5, 4.0), -1.0)  # new weights, of the same size
    assert (tmp_path / "a" / DATA_FILE).stat().st_size == (tmp_path / "b" / DATA_FILE).stat().st_size
    second = saved_models.remote_version(uri)
    assert second != first
    newer = saved_models.fetch(uri)
    assert newer != local and len(data_reads(emu)) == 1
    assert cached_copies(uri) == [os.path.basename(newer)]  # the superseded copy is gone

    # The driver saw one version; an executor that downloads another (replaced meanwhile) refuses it.
    with pytest.raises(saved_models.SavedModelChangedError, match=f"the SavedModel at {uri} changed while"):
        saved_models.fetch(uri, version=first)
    assert os.listdir(saved_models.cache_root()) == [os.path.basename(newer)]  # no staging copy left


def test_a_path_without_a_saved_model_and_hdfs_without_namenodes_are_named(emu, monkeypatch):
    storage_for(emu.uri("/models/empty/notes.txt")).write_bytes(emu.uri("/models/empty/notes.txt"), b"x")
    with pytest.raises(FileNotFoundError, match=r"no SavedModel at webhdfs://.*/models/empty: .*saved_model.pb is"):
        saved_models.remote_version(emu.uri("/models/empty"))
    monkeypatch.delenv(WEBHDFS_ENV, raising=False)
    clear_cached_storages()
    with pytest.raises(WebHDFSConfigError, match=f"set {WEBHDFS_ENV}"):
        saved_models.remote_version("hdfs://ns/models/linear")


@pytest.mark.integration
def test_predict_scores_with_a_saved_model_on_hdfs_fetched_by_each_executor(spark, emu, monkeypatch, tmp_path):
    # hdfs:// names no namenode: the driver has AIRFLOW_TFOS_WEBHDFS, the executors of the shared cluster do not.
    monkeypatch.setenv(WEBHDFS_ENV, emu.config().to_json())
    clear_cached_storages()
    uri = "hdfs://ns/models/linear"
    publish_linear_model(tmp_path / "a", uri, (3.0, -2.0), 1.0)
    frame = spark.range(0, 300, numPartitions=3).selectExpr(
        "id", "array(cast(id % 7 as float), cast(id % 5 as float)) as x"
    )

    def scores(w, b) -> None:
        scored = predict(frame, uri, "x", batch_size=64)  # the driver fetches and loads it here
        for name in cached_copies(uri):
            shutil.rmtree(os.path.join(saved_models.cache_root(), name))  # so that the executors fetch it themselves
        emu.requests.clear()
        rows = scored.collect()
        assert len(rows) == 300
        for row in rows:
            assert row["prediction"] == pytest.approx(w[0] * (row["id"] % 7) + w[1] * (row["id"] % 5) + b, abs=1e-4)

    scores((3.0, -2.0), 1.0)
    assert data_reads(emu)  # the executors read the export over WebHDFS with the driver's settings
    emu.requests.clear()
    assert len(predict(frame, uri, "x").collect()) == 300 and not data_reads(emu)  # unchanged: loaded everywhere

    publish_linear_model(tmp_path / "b", uri, (0.5, 4.0), -1.0)
    scores((0.5, 4.0), -1.0)  # the changed export is fetched again, by the driver and the executors
    assert data_reads(emu)
    for name in cached_copies(uri):  # what the executors fetched into this machine's cache
        shutil.rmtree(os.path.join(saved_models.cache_root(), name))
