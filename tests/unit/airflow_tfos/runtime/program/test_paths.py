"""TFoS path rules: where a path without a scheme, or a relative one, points."""

from __future__ import annotations

import getpass

import pytest

from airflow_tfos.runtime.program.paths import absolute_path


@pytest.mark.parametrize(
    ("path", "default_fs", "expected"),
    [
        ("hdfs://nn:8020/a", "file://", "hdfs://nn:8020/a"),
        ("file:///x/y", "hdfs://nn:8020", "file:///x/y"),
        ("/data/set", "hdfs://nn:8020", "hdfs://nn:8020/data/set"),
        ("/data/set", "file://", "file:///data/set"),
        ("models/m1", "file://", "file:///home/me/job/models/m1"),
        ("models/m1", "hdfs://nn:8020", f"hdfs://nn:8020/user/{getpass.getuser()}/models/m1"),
        ("models/m1", "hdfs://", f"hdfs:///user/{getpass.getuser()}/models/m1"),  # as TFoS, not hdfs:/user
        ("/data/set", "viewfs://", "viewfs:///data/set"),
    ],
)
def test_absolute_path_follows_tfos_rules(path, default_fs, expected):
    assert absolute_path(path, default_fs=default_fs, working_dir="/home/me/job") == expected
