"""InputMode.TENSORFLOW file shards and readers, without Spark. On the local cluster:
tests/integration/spark/test_files_and_inference.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_tfos.runtime.feed.files import shard_files
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.storage import FileInfo, storage_for


class TestShardFiles:
    files = [FileInfo(f"f{i}", size) for i, size in enumerate([100, 90, 50, 40, 30, 10, 5])]

    def test_shards_are_disjoint_complete_and_balanced_by_size(self):
        shards = [shard_files(self.files, 3, i) for i in range(3)]
        names = sorted(f.path for shard in shards for f in shard)
        assert names == sorted(f.path for f in self.files)
        loads = [sum(f.size for f in shard) for shard in shards]
        assert max(loads) - min(loads) <= 45  # greedy by size: 105 / 100 / 120

    def test_same_split_whatever_the_listing_order(self):
        assert shard_files(list(reversed(self.files)), 2, 1) == shard_files(self.files, 2, 1)

    def test_fewer_files_than_nodes_is_a_clear_error(self):
        with pytest.raises(FeedConfigError, match="2 file\\(s\\) for 3 training nodes"):
            shard_files(self.files[:2], 3, 0)


def test_file_readers_lay_batches_out_for_the_workers_given(tmp_path):
    """With ``workers=2`` each batch comes twice, to be auto-sharded by data (one copy per node, as the fed
    dataset's); without, the batches come as they are and tf.data's auto-sharding is off."""
    (tmp_path / "rows.csv").write_text("a,b,y\n" + "".join(f"{i},{-i},{i % 2}\n" for i in range(7)))
    script = f"""
import json
from airflow_tfos.runtime.feed import Feed
from airflow_tfos.runtime.feed.files import csv_dataset
feed = Feed(features=["a", "b"], label="y", batch_size=4, shuffle=False)
for workers in (1, 2):
    dataset = csv_dataset([{str(tmp_path / "rows.csv")!r}], feed, workers=workers)
    policy = dataset.options().experimental_distribute.auto_shard_policy.name
    print(json.dumps({{"policy": policy, "a": [x["a"].numpy().tolist() for x, _ in dataset]}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    lines = [json.loads(line) for line in done.stdout.strip().splitlines()[-2:]]
    assert lines[0] == {"policy": "OFF", "a": [[0, 1, 2, 3], [4, 5, 6]]}, done.stderr[-2000:]
    assert lines[1] == {"policy": "DATA", "a": [[0, 1, 2, 3] * 2, [4, 5, 6] * 2]}


def test_file_readers_reject_a_bad_worker_count(tmp_path):
    from airflow_tfos.runtime.feed.files import parquet_dataset
    from airflow_tfos.shared.feed import Feed

    with pytest.raises(FeedConfigError, match="workers must be a positive integer"):
        parquet_dataset([str(tmp_path / "none.parquet")], Feed(features="x"), workers=0)


def test_unknown_scheme_names_the_supported_ones():
    with pytest.raises(ValueError, match="no storage for 's3://b/k': supported are file://"):
        storage_for("s3://b/k")
